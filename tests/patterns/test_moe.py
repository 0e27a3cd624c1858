"""patterns/moe.py reads the router behind a captured experts call, or declines with a reason.

Small modules calling ``mobius::experts`` after each router form, exported with torch.export on
CPU (no HF model): the claim's attributes are what was read; the declines say why.
"""

from __future__ import annotations

import math

import pytest
import torch

from patterns import experts, moe
from patterns.base import Claim, Decline

H, INTER, E, K = 16, 8, 6, 2


class _Block(torch.nn.Module):
    def __init__(self, router: str, activation: str = "silu") -> None:
        super().__init__()
        self.router, self.activation = router, activation
        self.gate = torch.nn.Parameter(torch.randn(E, H))
        self.bias = torch.nn.Parameter(torch.randn(E))
        self.gate_up = torch.nn.Parameter(torch.randn(E, 2 * INTER, H))
        self.down = torch.nn.Parameter(torch.randn(E, H, INTER))

    def forward(self, x):
        logits = torch.nn.functional.linear(x, self.gate)
        if self.router.startswith("softmax_topk"):
            values, index = torch.topk(torch.softmax(logits.float(), dim=-1), K, dim=-1)
            if self.router.endswith("renormalised"):
                values = values / values.sum(dim=-1, keepdim=True)
        elif self.router == "topk_softmax":
            values, index = torch.topk(logits, K, dim=-1)
            values = torch.softmax(values, dim=1)
        elif self.router.startswith("sigmoid"):
            scores = torch.sigmoid(logits)
            _, index = torch.topk(scores + self.bias, K, dim=-1)
            values = scores.gather(1, index)
            if self.router.endswith("in_place"):  # GLM-4-MoE, DeepSeek: ``/=`` traced as div_
                values /= values.sum(dim=-1, keepdim=True) + 1e-20
                values = values * 2.5
            else:
                values = values / (values.sum(dim=-1, keepdim=True) + 1e-20) * 2.5
        else:  # raw logits as weights: may be negative
            values, index = torch.topk(logits, K, dim=-1)
        return torch.ops.mobius.experts(
            x, index, values, self.gate_up, self.down, None, None, self.activation, False,
            1.0, 0.0, math.inf,
        )  # fmt: skip


def _match(router: str, activation: str = "silu") -> Claim | Decline:
    program = torch.export.export(_Block(router, activation), (torch.randn(5, H),), strict=False)
    node = next(n for n in program.graph.nodes if n.target is experts.OP)
    return moe.match(node)


@pytest.mark.parametrize(
    "router,kind,renormalize",
    [
        ("softmax_topk_renormalised", "softmax_topk", True),  # Mixtral
        ("softmax_topk", "softmax_topk", False),  # Qwen-MoE without norm_topk_prob, OLMoE
        ("topk_softmax", "topk_softmax", True),  # GPT-OSS
        ("sigmoid", "sigmoid", True),
        ("sigmoid_in_place", "sigmoid", True),  # DeepSeek, GLM-4-MoE
    ],
)
def test_router_forms_are_read(router, kind, renormalize):
    claim = _match(router)
    assert isinstance(claim, Claim) and claim.component == "MoE (com.microsoft)"
    assert claim.attributes["routing"] == kind
    assert claim.attributes["top_k"] == K and claim.attributes["num_experts"] == E
    assert claim.attributes["renormalize"] is renormalize
    if kind == "sigmoid":
        assert claim.attributes["routed_scaling"] == 2.5
        assert claim.attributes["group_limited"] is False
    assert claim.check_closed() is None


def test_unknown_router_declines():
    found = _match("raw_logits")
    assert isinstance(found, Decline)
    assert "router is none of" in found.reason and "computed one by one" in found.reason


def test_non_swiglu_experts_decline():
    found = _match("softmax_topk_renormalised", activation="gelu")
    assert isinstance(found, Decline) and "SwiGLU experts only, not gelu" in found.reason
