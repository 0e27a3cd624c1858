"""Unmasked bidirectional sdpa -> ONNX Attention (patterns/bidirectional_sdpa.py): what it claims
and declines (checked end to end in tests/mobius/diffusers)."""

from __future__ import annotations

import torch

from mobius.testing.lowering import exported_node
from patterns import bidirectional_sdpa
from patterns.base import Claim, Decline, MatchContext, aten


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
    return exported_node(_Attend(**kwargs), args, aten.scaled_dot_product_attention)


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
