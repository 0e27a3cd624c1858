"""A torch.distributions object built from traced tensors traces without its value checks."""

import pytest
import torch

from mobius.synth.shims import unchecked_distributions
from mobius.testing.lowering import check_lowering


class Entropy(torch.nn.Module):
    """BLT's patcher step: the entropy of each position's next-token distribution."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(8, 16)

    def forward(self, x):
        return torch.distributions.Categorical(logits=self.head(x)).entropy()


def test_value_checks_block_export():
    # torch._dynamo turns the checks off process-wide once it patches torch (any
    # compile or flex-attention call earlier in the worker), so turn them on here.
    before = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(True)
    try:
        with pytest.raises(Exception, match="data-dependent"):
            torch.export.export(Entropy(), (torch.randn(2, 5, 8),), strict=False)
    finally:
        torch.distributions.Distribution.set_default_validate_args(before)


def test_entropy_traces_and_matches_without_checks():
    before = torch.distributions.Distribution._validate_args
    with unchecked_distributions():
        check_lowering(
            Entropy().eval(),
            [torch.randn(2, 5, 8)],
            [{0: "b", 1: "s"}],
            [torch.randn(3, 9, 8)],
            atol=1e-4,
        )
    assert torch.distributions.Distribution._validate_args == before
