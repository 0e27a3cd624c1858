"""GroupNorm -> GroupNormalization and unmasked bidirectional sdpa -> Attention: what each
pattern claims and declines (numbers are checked end to end in tests/mobius/diffusers)."""

from __future__ import annotations

import torch

from patterns import bidirectional_sdpa, group_norm
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
