"""Grad-mode regions (wrap_with_set_grad_enabled) are inlined after export."""

import torch

from mobius.synth.inline import GRAD_REGION, inline_grad_regions
from mobius.testing.lowering import check_lowering


class GradRegions(torch.nn.Module):
    """no_grad and enable_grad regions, one inside the other, as MoE routers write them."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        with torch.no_grad():
            z = y.sigmoid() * 2
            with torch.enable_grad():
                z = z + y.max(-1, keepdim=True).values
        return z * y, y


def test_regions_inlined():
    module = GradRegions().eval()
    program = torch.export.export(module, (torch.randn(2, 3, 4),), strict=False)
    assert sum(n.target is GRAD_REGION for n in program.graph.nodes) > 0
    inline_grad_regions(program)
    assert not any(n.target is GRAD_REGION for n in program.graph.nodes)
    x = torch.randn(2, 3, 4)
    for got, want in zip(program.module()(x), module(x), strict=True):
        torch.testing.assert_close(got, want)


def test_regions_lower_with_dynamic_shapes():
    check_lowering(
        GradRegions().eval(),
        [torch.randn(2, 3, 4)],
        [{0: "b", 1: "s"}],
        [torch.randn(5, 7, 4)],
    )
