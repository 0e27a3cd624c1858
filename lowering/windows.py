"""Sliding windows over one axis: ``Tensor.unfold``."""

from __future__ import annotations

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.unfold)
def unfold(ctx: LoweringContext, node: torch.fx.Node):
    """``x.unfold(dim, size, step)``: the windows ``x[..., i*step : i*step + size, ...]`` stacked on
    ``dim``, each window's elements on a new last axis. One Gather with a [windows, size] index."""
    x, dim, size, step = node.args[:4]
    rank = ctx.rank(x)
    dim = dim % rank
    data = ctx.value(x)
    length = ctx.op.Squeeze(ctx.op.Shape(data, start=dim, end=dim + 1))
    windows = ctx.op.Add(
        ctx.op.Div(ctx.op.Sub(length, ctx.scalar_int(size)), ctx.scalar_int(step)),
        ctx.scalar_int(1),
    )
    starts = ctx.op.Mul(
        ctx.op.Range(ctx.scalar_int(0), windows, ctx.scalar_int(1)), ctx.scalar_int(step)
    )
    offsets = ctx.op.Range(ctx.scalar_int(0), ctx.scalar_int(size), ctx.scalar_int(1))
    index = ctx.op.Add(
        ctx.op.Unsqueeze(starts, ctx.ints([1])), ctx.op.Unsqueeze(offsets, ctx.ints([0]))
    )
    gathered = ctx.op.Gather(data, index, axis=dim)  # [..., windows, size, ...]
    perm = [*range(dim + 1), *range(dim + 2, rank + 1), dim + 1]
    return ctx.op.Transpose(gathered, perm=perm)
