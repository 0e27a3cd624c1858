"""Writes into slices of a graph-made tensor become scatters (``mobius/synth/view_writes.py``),
and writes into a view that nothing else reads rebind it: no re-trace, the same values as
PyTorch; writes it cannot rewrite are left to functionalisation."""

from __future__ import annotations

import pytest
import torch

from mobius.synth.decompose import decompose_unlowered
from mobius.synth.view_writes import rewrite_view_writes
from mobius.synth.views import mutates
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


class InPlaceOps(torch.nn.Module):
    """In-place ops into views: rows added to (Gemma 3n's ``corrected[1:] += first``), a masked
    fill, an add into a reshaped product nothing else reads, writes through a permute and a
    transpose of a tensor read afterwards."""

    def forward(self, x, row, block):
        rows = x * 3
        rows[:, 1:] += row.unsqueeze(1)
        rows[:, 0].masked_fill_(row > 0, 0.5)
        mixed = torch.matmul(block.transpose(1, 2), block).view(2, 9)
        mixed += 1.0
        table = x * 2  # read after writes through a permute and a transpose (Cosmos' rotary)
        table.permute(2, 0, 1)[1].copy_(row[:, :1] * 5)
        table.transpose(0, 1)[0].mul_(row)
        return rows, mixed.sum(-1), table + 0.0


class ReshapedAndRead(torch.nn.Module):
    """An add into a reshaped view whose tensor is read after the write: no scatter exists."""

    def forward(self, x, row, block):
        base = x * 2
        flat = base.view(2, 15)
        flat += 1.0
        return base + 0.0


class StaleView(torch.nn.Module):
    """A view made before the write and read after it: it must see the written row."""

    def forward(self, x, row, block):
        buf = x.clone()
        early = buf[:, 1:3]
        buf[:, 1] = row
        return early * 1.0, buf


class IntoABuffer(torch.nn.Module):
    """A buffer written whole, then read (Phi-3's LongRoPE picks its inverse frequencies so)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("freq", torch.ones(3), persistent=False)
        self.register_buffer("long", torch.linspace(0.5, 2.0, 3), persistent=False)

    def forward(self, x, row, block):
        self.freq.copy_(self.long * 2)
        row.mul_(3)  # an input written whole
        return x * self.freq, row + 1


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


def test_in_place_ops_into_views_are_rewritten_without_a_re_trace():
    program = _export(InPlaceOps())
    written = {n for n in program.graph.nodes if getattr(n.target, "_schema", None) is not None}
    # ``rows[:, 1:] += ...`` is an ``add_`` into the slice, then its ``copy_`` back (setitem)
    assert sum(n.target._schema.is_mutable for n in written) == 6
    assert decompose_unlowered(program) is program
    assert not any(
        n.target._schema.is_mutable for n in program.graph.nodes if n.op == "call_function"
    )
    check_lowering(InPlaceOps(), ARGS)


def test_a_whole_buffer_or_input_written_is_rebound_in_the_graph():
    program = _export(IntoABuffer())
    assert decompose_unlowered(program) is program
    assert not any(mutates(n) for n in program.graph.nodes)
    check_lowering(IntoABuffer(), [a.clone() for a in ARGS])


@pytest.mark.parametrize(
    "module",
    [StaleView(), IntoAnInput(), ReshapedAndRead()],
    ids=["stale-view", "input", "reshaped-and-read"],
)
def test_writes_it_cannot_rewrite_are_left_to_functionalisation(module):
    program = _export(module)
    writes = [n for n in program.graph.nodes if n.op == "call_function" and mutates(n)]
    assert rewrite_view_writes(program.graph_module) == 0 and len(writes) == 1
    assert writes[0] in program.graph.nodes
    check_lowering(module, [a.clone() for a in ARGS])  # functionalised: still exact
