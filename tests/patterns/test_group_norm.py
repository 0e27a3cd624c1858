"""GroupNorm -> GroupNormalization (patterns/group_norm.py): what it claims and declines (checked
end to end in tests/mobius/diffusers)."""

from __future__ import annotations

import torch

from mobius.testing.lowering import exported_node
from patterns import group_norm
from patterns.base import Claim, aten


class _GroupNorm(torch.nn.Module):
    def __init__(self, affine: bool) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4, eps=1e-6, affine=affine)

    def forward(self, x):
        return self.norm(x)


def test_group_norm_is_claimed_with_its_groups_and_epsilon():
    node = exported_node(_GroupNorm(True), (torch.randn(2, 4, 3, 5),), aten.group_norm)
    claim = group_norm.match(node)
    assert isinstance(claim, Claim) and claim.component == "GroupNormalization"
    assert claim.attributes == {"num_groups": 2, "channels": 4, "epsilon": 1e-6}


def test_group_norm_without_affine_and_on_sequences_is_claimed():
    node = exported_node(_GroupNorm(False), (torch.randn(2, 4, 7),), aten.group_norm)
    assert isinstance(group_norm.match(node), Claim)


def test_group_norm_declines_other_dtypes_and_claims_rank_two():
    half = exported_node(_GroupNorm(True).half(), (torch.randn(2, 4, 3).half(),), aten.group_norm)
    assert "float32" in group_norm.match(half).reason
    flat = exported_node(_GroupNorm(True), (torch.randn(2, 4),), aten.group_norm)
    assert isinstance(group_norm.match(flat), Claim)
