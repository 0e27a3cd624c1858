"""Writes into slices of a graph-made tensor become scatters (``mobius/synth/view_writes.py``):
no re-trace, the same values as PyTorch; writes it cannot rewrite are left to functionalisation."""

from __future__ import annotations

import pytest
import torch

from mobius.synth.decompose import decompose_unlowered
from mobius.synth.view_writes import rewrite_view_writes
from mobius.testing.lowering import check_lowering

ARGS = [torch.randn(2, 5, 3), torch.randn(2, 3), torch.randn(2, 2, 3)]


class SliceWrites(torch.nn.Module):
    """Rows written one by one and in a block, through nested views and a no-op cast."""

    def forward(self, x, row, block):
        buf = x.clone()
        buf[:, 1] = row
        buf[:, 2:4].copy_(block)
        buf[:, 3:][:, 1].to(torch.float32).copy_(row * 3)  # nested views, a cast that is a view
        late = buf[:, :2]  # made after the writes: sees them
        return buf * 2, late.sum(1)


class StaleView(torch.nn.Module):
    """A view made before the write and read after it: it must see the written row."""

    def forward(self, x, row, block):
        buf = x.clone()
        early = buf[:, 1:3]
        buf[:, 1] = row
        return early * 1.0, buf


class IntoAnInput(torch.nn.Module):
    def forward(self, x, row, block):
        x[:, 1] = row
        return x + 1


def _copies(program: torch.export.ExportedProgram) -> int:
    return sum(n.target is torch.ops.aten.copy_.default for n in program.graph.nodes)


def _export(module: torch.nn.Module) -> torch.export.ExportedProgram:
    return torch.export.export(module, tuple(a.clone() for a in ARGS), strict=False)


def test_slice_writes_become_scatters_without_a_re_trace():
    program = _export(SliceWrites())
    assert _copies(program) == 3
    assert decompose_unlowered(program) is program and _copies(program) == 0
    check_lowering(SliceWrites(), ARGS)


@pytest.mark.parametrize("module", [StaleView(), IntoAnInput()], ids=["stale-view", "input"])
def test_writes_it_cannot_rewrite_are_left_to_functionalisation(module):
    program = _export(module)
    assert rewrite_view_writes(program.graph_module) == 0 and _copies(program) == 1
    check_lowering(module, [a.clone() for a in ARGS])  # functionalised: still exact
