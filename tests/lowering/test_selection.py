"""Data-dependent selections, against torch."""

import torch

from mobius.testing.lowering import check_lowering


class UniqueConsecutive(torch.nn.Module):
    def forward(self, x):
        return torch.unique_consecutive(x)


def test_unique_consecutive_keeps_the_first_of_each_run():
    x = torch.tensor([[1, 1, 2], [2, 0, 0]])
    other = torch.tensor([[5, 5], [5, 5], [7, 5]])
    check_lowering(UniqueConsecutive(), [x], [{0: "a", 1: "b"}], other_args=[other])
