"""GroupNorm -> GroupNormalization, unmasked bidirectional sdpa -> Attention and the sinusoidal
timestep embedding -> one component: what each pattern claims and declines (the first two
are checked end to end in tests/mobius/diffusers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mobius.testing.lowering import lower_module, run_onnx
from patterns import bidirectional_sdpa, group_norm, timestep_embedding
from patterns.base import Claim, Decline, MatchContext, aten, is_op


def _node(module: torch.nn.Module, args: tuple, op) -> torch.fx.Node:
    program = torch.export.export(module, args)
    return next(n for n in program.graph.nodes if is_op(n, op))


class _GroupNorm(torch.nn.Module):
    def __init__(self, affine: bool) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4, eps=1e-6, affine=affine)

    def forward(self, x):
        return self.norm(x)


def test_group_norm_is_claimed_with_its_groups_and_epsilon():
    node = _node(_GroupNorm(True), (torch.randn(2, 4, 3, 5),), aten.group_norm)
    claim = group_norm.match(node)
    assert isinstance(claim, Claim) and claim.component == "GroupNormalization"
    assert claim.attributes == {"num_groups": 2, "channels": 4, "epsilon": 1e-6}


def test_group_norm_without_affine_and_on_sequences_is_claimed():
    node = _node(_GroupNorm(False), (torch.randn(2, 4, 7),), aten.group_norm)
    assert isinstance(group_norm.match(node), Claim)


def test_group_norm_declines_other_dtypes_and_claims_rank_two():
    half = _node(_GroupNorm(True).half(), (torch.randn(2, 4, 3).half(),), aten.group_norm)
    assert "float32" in group_norm.match(half).reason
    flat = _node(_GroupNorm(True), (torch.randn(2, 4),), aten.group_norm)
    assert isinstance(group_norm.match(flat), Claim)


class _Attend(torch.nn.Module):
    def __init__(self, masked: bool = False, causal: bool = False) -> None:
        super().__init__()
        self.masked, self.causal = masked, causal

    def forward(self, q, kv):
        mask = torch.ones(q.shape[2], kv.shape[2], dtype=torch.bool) if self.masked else None
        return torch.nn.functional.scaled_dot_product_attention(
            q, kv, kv, attn_mask=mask, is_causal=self.causal
        )


def _sdpa(**kwargs) -> torch.fx.Node:
    args = (torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6 if kwargs.get("causal") else 3, 4))
    return _node(_Attend(**kwargs), args, aten.scaled_dot_product_attention)


def test_cross_attention_without_mask_is_fused():
    claim = bidirectional_sdpa.match(_sdpa(), MatchContext())
    assert isinstance(claim, Claim) and claim.component == "Attention"
    assert claim.attributes["cross"] and not claim.attributes["causal"]
    assert claim.attributes["heads"] == 2 and claim.attributes["scaling"] == 0.5


def test_masked_or_causal_calls_decline():
    for kwargs in ({"masked": True}, {"causal": True}):
        assert isinstance(bidirectional_sdpa.match(_sdpa(**kwargs), MatchContext()), Decline)


def test_left_to_the_transformers_patterns_with_padding_or_a_cache():
    node = _sdpa()
    assert bidirectional_sdpa.match(node, MatchContext(causal=True)) is None
    assert bidirectional_sdpa.match(node, MatchContext(padding_mask="attention_mask")) is None


class _Timesteps(torch.nn.Module):
    def __init__(self, dim: int, flip: bool, shift: float, scale: float = 1.0) -> None:
        super().__init__()
        self.dim, self.flip, self.shift, self.scale = dim, flip, shift, scale

    def forward(self, t):
        from diffusers.models.embeddings import get_timestep_embedding

        return get_timestep_embedding(t, self.dim, self.flip, self.shift, self.scale) * 2


@pytest.mark.parametrize(("dim", "flip", "shift", "scale"), [(8, True, 0, 1), (7, False, 1, 1000)])
def test_timestep_embedding_is_one_component_with_pytorchs_values(dim, flip, shift, scale):
    module = _Timesteps(dim, flip, shift, scale)
    model = lower_module(module, (torch.rand(3) * 1000,), [{0: "batch"}])
    ops = [n.op_type for n in model.graph]
    assert "Range" not in ops and "Exp" not in ops  # the frequencies are one constant
    assert ops.count("Sin") == ops.count("Cos") == 1
    t = torch.rand(5) * 900
    np.testing.assert_allclose(run_onnx(model, (t,))[0], module(t).numpy(), atol=1e-4, rtol=0)
    cat = next(n for n in torch.export.export(module, (t,)).graph.nodes if is_op(n, aten.cat))
    claim = timestep_embedding.match(cat)
    assert isinstance(claim, Claim) and claim.component == "TimestepEmbedding"
    assert claim.attributes["frequencies"] == dim // 2
    assert claim.attributes["flip_sin_to_cos"] is flip and claim.attributes["scale"] == scale


class _InputFrequencies(torch.nn.Module):
    def forward(self, t, freqs):
        x = t[:, None] * freqs[None, :]
        return torch.cat([torch.sin(x), torch.cos(x)], dim=-1)


def test_timestep_embedding_declines_frequencies_from_an_input():
    node = _node(_InputFrequencies(), (torch.rand(3), torch.rand(4)), aten.cat)
    assert "constant frequencies" in timestep_embedding.match(node).reason
