"""Named dimensions a trace only holds for up to a bound (a branch on the length) are caught."""

from __future__ import annotations

import torch

from mobius.synth.trace_bounds import bounded_dims
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

SPECS = [TensorSpec("input_ids", torch.float32, (BATCH, SEQUENCE))]


class ChunkedOrNot(torch.nn.Module):
    """Short inputs one way, long ones another (as chunked linear-attention kernels do)."""

    def forward(self, x):
        if x.shape[1] <= 64:
            return x.cumsum(1)
        return x.flip(1).cumsum(1)


class Plain(torch.nn.Module):
    def forward(self, x):
        return x.cumsum(1)


def _export(module: torch.nn.Module) -> torch.export.ExportedProgram:
    dims = ({0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO},)
    return torch.export.export(module, (torch.zeros(2, 7),), dynamic_shapes=dims, strict=False)


def test_a_branch_on_the_length_bounds_the_sequence():
    assert bounded_dims(_export(ChunkedOrNot()), SPECS, limit=1024) == ["2 <= input_ids[1] <= 64"]


class WholeChunks(torch.nn.Module):
    """A Python loop over chunks of 4 tokens (as chunked gated-delta kernels have)."""

    def forward(self, x):
        padded = torch.nn.functional.pad(x, (0, (4 - x.shape[1] % 4) % 4))
        chunks = padded.reshape(x.shape[0], -1, 4)
        return torch.cat([chunks[:, i].cumsum(1) for i in range(chunks.shape[1])], 1)


def test_a_loop_over_chunks_holds_for_its_chunk_count_only():
    # traced at 7 tokens: two chunks; 2 to 4 tokens make one
    assert bounded_dims(_export(WholeChunks()), SPECS, limit=1024) == ["input_ids[1] != 2"]


def test_a_bound_at_the_models_own_length_limit_is_not_a_branch():
    assert bounded_dims(_export(ChunkedOrNot()), SPECS, limit=64) == []


def test_no_branch_no_bound():
    assert bounded_dims(_export(Plain()), SPECS, limit=1024) == []


def test_equality_false_only_where_a_conv_length_is_negative_rules_out_nothing():
    """SEW's feature encoder: at 2 samples the frame count is negative (the model cannot run
    there), so the equality failing there is no length restriction; a chunk count still is."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    from mobius.synth.trace_bounds import fails_at

    s = sympy.Symbol("s", integer=True, positive=True)
    frames = FloorDiv(FloorDiv(s, 80) - 3, 2)
    assert not fails_at(sympy.Eq(sympy.Max(1, frames), frames), s, 2)
    assert fails_at(sympy.Eq(FloorDiv(s, 64), 3), s, 2)
