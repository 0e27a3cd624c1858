"""Fused experts that loop over the experts some token picked are computed in a fixed shape."""

import copy

import torch

from mobius.synth.shims import _is_looped_experts, make_traceable
from mobius.testing.configs import tiny_config_for
from mobius.testing.lowering import check_lowering
from mobius.testing.tiny import randomize


class LoopedExperts(torch.nn.Module):
    """A plain experts module of the looped kind (no identity experts)."""

    def __init__(self, experts: int = 4, hidden: int = 8, inner: int = 6) -> None:
        super().__init__()
        self.gate_up_proj = torch.nn.Parameter(torch.randn(experts, 2 * inner, hidden))
        self.down_proj = torch.nn.Parameter(torch.randn(experts, hidden, inner))
        self.act_fn = torch.nn.SiLU()

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e in range(self.gate_up_proj.shape[0]):
            tok, pos = torch.where(top_k_index == e)
            gate, up = (hidden_states[tok] @ self.gate_up_proj[e].T).chunk(2, -1)
            h = (self.act_fn(gate) * up) @ self.down_proj[e].T
            out.index_add_(0, tok, h * top_k_weights[tok, pos, None])
        return out


class ClampedExperts(LoopedExperts):
    """Step3p7's kind: its own gate (clamped), and an index past the experts is a skipped sentinel."""

    def _apply_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        return self.act_fn(gate).clamp(max=0.5) * up.clamp(min=-0.5, max=0.5)

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e in range(self.gate_up_proj.shape[0]):
            tok, pos = torch.where(top_k_index == e)
            h = self._apply_gate(hidden_states[tok] @ self.gate_up_proj[e].T) @ self.down_proj[e].T
            out.index_add_(0, tok, h * top_k_weights[tok, pos, None])
        return out


class IdentityExperts(LoopedExperts):
    """LongCat-Flash's kind (transformers <= 5.24): ``gate_up_proj`` has rows for zero-compute
    experts past the last ``down_proj``; a token routed there passes through ``identity_expert``."""

    def __init__(self, routed: int = 4, zero: int = 2, hidden: int = 8, inner: int = 6) -> None:
        super().__init__(routed, hidden, inner)
        self.gate_up_proj = torch.nn.Parameter(torch.randn(routed + zero, 2 * inner, hidden))
        self.identity_expert = torch.nn.Identity()

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e in range(self.gate_up_proj.shape[0]):
            tok, pos = torch.where(top_k_index == e)
            if e >= self.down_proj.shape[0]:
                h = self.identity_expert(hidden_states[tok])
            else:
                gate, up = (hidden_states[tok] @ self.gate_up_proj[e].T).chunk(2, -1)
                h = (self.act_fn(gate) * up) @ self.down_proj[e].T
            out.index_add_(0, tok, h * top_k_weights[tok, pos, None])
        return out


class Routed(torch.nn.Module):
    """Routing (top-k of a projection) then the experts, so indices come from the input."""

    def __init__(self, experts: torch.nn.Module, count: int, hidden: int, k: int) -> None:
        super().__init__()
        self.router = torch.nn.Linear(hidden, count)
        self.experts, self.k = experts, k

    def forward(self, x):
        weights, index = self.router(x).softmax(-1).topk(self.k, -1)
        return self.experts(x, index, weights)


def _check_shim(experts: torch.nn.Module, count: int, hidden: int, k: int) -> None:
    torch.manual_seed(0)
    shimmed = make_traceable(copy.deepcopy(experts))
    assert _is_looped_experts(experts)
    x = torch.randn(11, hidden)
    index = torch.stack([torch.randperm(count)[:k] for _ in range(11)])  # includes identity experts
    weights = torch.rand(11, k)
    torch.testing.assert_close(shimmed(x, index, weights), experts(x, index, weights))
    model = Routed(shimmed, count, hidden, k).eval()
    check_lowering(model, [torch.randn(5, hidden)], [{0: "t"}], [torch.randn(9, hidden)], atol=1e-4)


def test_identity_experts():
    experts = IdentityExperts().eval()
    assert experts.gate_up_proj.shape[0] > experts.down_proj.shape[0]
    _check_shim(experts, experts.gate_up_proj.shape[0], 8, k=3)


def test_plain_looped_experts():
    _check_shim(LoopedExperts().eval(), 4, 8, k=2)


def test_interface_experts_untouched():
    experts = LoopedExperts()
    experts.has_gate = True  # what transformers' experts interface sets
    assert not _is_looped_experts(experts)


def test_own_gate_and_sentinel_index():
    _check_shim(ClampedExperts().eval(), 5, 8, k=2)  # index 4 is the sentinel


def test_dbrx_flat_expert_layout():
    # DBRX keeps w1/v1/w2 flat on a child module and takes [batch, seq, hidden]; index E is a sentinel
    from transformers.models.dbrx.modeling_dbrx import DbrxExperts

    config = tiny_config_for("dbrx").ffn_config
    experts = randomize(DbrxExperts(config).float().eval(), seed=0)
    count, hidden = config.moe_num_experts, config.hidden_size
    shimmed = make_traceable(copy.deepcopy(experts))
    torch.manual_seed(0)
    x = torch.randn(2, 5, hidden)
    index = torch.stack([torch.randperm(count)[:2] for _ in range(10)])
    weights = torch.rand(10, 2)
    torch.testing.assert_close(shimmed(x, index, weights), experts(x, index, weights))
    model = Routed(shimmed, count, hidden, k=2).eval()
    check_lowering(
        model, [torch.randn(1, 5, hidden)], [{1: "t"}], [torch.randn(1, 9, hidden)], atol=1e-4
    )
