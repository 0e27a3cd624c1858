"""Tensors laid out on grids: meshgrid, broadcast_tensors, diag_embed, pixel_unshuffle and the
differences of neighbours (diff)."""

from __future__ import annotations

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers
from lowering.shape import INT64_MAX

aten = torch.ops.aten


def _broadcast_shape(ctx: LoweringContext, tensors: list[torch.fx.Node]) -> object:
    """The shape ``tensors`` broadcast to: each shape padded with leading ones to the largest
    rank, then the elementwise maximum (sizes are equal or 1)."""
    rank = max(ctx.rank(t) for t in tensors)
    shapes = []
    for tensor in tensors:
        shape, missing = ctx.op.Shape(ctx.value(tensor)), rank - ctx.rank(tensor)
        shapes.append(ctx.op.Concat(ctx.ints([1] * missing), shape, axis=0) if missing else shape)
    return shapes[0] if len(shapes) == 1 else ctx.op.Max(*shapes)


@lowers(aten.broadcast_tensors)
def broadcast_tensors(ctx: LoweringContext, node: torch.fx.Node):
    shape = _broadcast_shape(ctx, list(node.args[0]))
    return tuple(ctx.op.Expand(ctx.value(t), shape) for t in node.args[0])


@lowers(aten.meshgrid)
def meshgrid(ctx: LoweringContext, node: torch.fx.Node):
    """``torch.meshgrid(*tensors, indexing=...)``: tensor i (0-d or 1-d) along axis i of the
    grid of all their lengths; ``xy`` swaps the first two axes."""
    tensors = node.args[0]
    indexing = node.kwargs.get("indexing", node.args[1] if len(node.args) > 1 else "ij")
    flat = [ctx.op.Reshape(ctx.value(t), ctx.ints([-1])) for t in tensors]
    axes = list(range(len(flat)))
    if indexing == "xy" and len(flat) > 1:
        axes[0], axes[1] = 1, 0
    lengths = [ctx.op.Shape(v) for v in flat]
    grid = ctx.op.Concat(*(lengths[axes.index(a)] for a in range(len(flat))), axis=0)
    outputs = []
    for value, axis in zip(flat, axes, strict=True):
        shape = [1] * len(flat)
        shape[axis] = -1
        outputs.append(ctx.op.Expand(ctx.op.Reshape(value, ctx.ints(shape)), grid))
    return tuple(outputs)


@lowers(aten.diag_embed)
def diag_embed(ctx: LoweringContext, node: torch.fx.Node):
    """The last axis of ``x`` as the ``offset`` diagonal of square matrices (side
    ``n + |offset|``) placed on the output axes ``dim1`` and ``dim2``, zero elsewhere."""
    x = node.args[0]
    args = list(node.args[1:]) + [None] * 3
    offset = node.kwargs.get("offset", args[0] if args[0] is not None else 0)
    dim1 = node.kwargs.get("dim1", args[1] if args[1] is not None else -2)
    dim2 = node.kwargs.get("dim2", args[2] if args[2] is not None else -1)
    rank = ctx.rank(x) + 1
    value = ctx.value(x)
    if offset:  # pad the diagonal's values to the matrix side
        pads = [0] * (rank - 1) * 2
        pads[rank - 2 + rank - 1] = abs(offset)
        value = ctx.op.Pad(value, ctx.ints(pads))
    side = ctx.op.Shape(value, start=-1)
    index = ctx.op.Range(
        ctx.constant(0, torch.int64), ctx.op.Squeeze(side), ctx.constant(1, torch.int64)
    )
    rows = ctx.op.Unsqueeze(index, ctx.ints([1]))
    mask = ctx.op.Equal(ctx.op.Sub(index, rows), ctx.constant(offset, torch.int64))  # col - row
    # the value of row r, column c is x[r] above the main diagonal and x[c] below it
    spread = ctx.op.Unsqueeze(value, ctx.ints([-1 if offset >= 0 else -2]))
    zero = ctx.op.CastLike(ctx.constant(0, torch.int64), value)
    matrices = ctx.op.Where(mask, spread, zero)  # [..., side, side]
    if (dim1 % rank, dim2 % rank) == (rank - 2, rank - 1):
        return matrices
    batch = [a for a in range(rank) if a not in (dim1 % rank, dim2 % rank)]
    perm = [0] * rank
    for source, target in enumerate(batch):
        perm[target] = source
    perm[dim1 % rank], perm[dim2 % rank] = rank - 2, rank - 1
    return ctx.op.Transpose(matrices, perm=perm)


@lowers(
    aten.pixel_unshuffle, declines=lambda n: None if n.args[0].meta["val"].dim() == 4 else "not 4-D"
)
def pixel_unshuffle(ctx: LoweringContext, node: torch.fx.Node):
    """[B, C, H, W] -> [B, C * r * r, H / r, W / r], channel ``c * r * r + i * r + j`` taking
    pixel (i, j) of each r x r block (ONNX's SpaceToDepth orders channels block-first)."""
    x, factor = ctx.value(node.args[0]), node.args[1]
    shape = ctx.op.Shape(x)
    batch, channels, height, width = (ctx.op.Gather(shape, ctx.ints([i])) for i in range(4))
    r = ctx.ints([factor])
    blocks = ctx.op.Concat(
        batch, channels, ctx.op.Div(height, r), r, ctx.op.Div(width, r), r, axis=0
    )
    moved = ctx.op.Transpose(ctx.op.Reshape(x, blocks), perm=[0, 1, 3, 5, 2, 4])
    out = ctx.op.Concat(
        batch, ctx.op.Mul(channels, ctx.ints([factor * factor])), ctx.op.Div(height, r),
        ctx.op.Div(width, r), axis=0,
    )  # fmt: skip
    return ctx.op.Reshape(moved, out)


@lowers(aten.diff)
def diff(ctx: LoweringContext, node: torch.fx.Node):
    """``torch.diff(x, n, dim, prepend, append)``: ``n`` times the difference of neighbours
    along ``dim`` (exclusive or for bools), after joining ``prepend`` and ``append``."""
    x = node.args[0]
    args = list(node.args[1:]) + [None] * 4
    times = node.kwargs.get("n", args[0] if args[0] is not None else 1)
    dim = node.kwargs.get("dim", args[1] if args[1] is not None else -1) % max(ctx.rank(x), 1)
    prepend, append = node.kwargs.get("prepend", args[2]), node.kwargs.get("append", args[3])
    dtype = ctx.out_dtype(node)
    parts = [ctx.value(t, dtype) for t in (prepend, x, append) if t is not None]
    value = parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=dim)
    axis, end = ctx.ints([dim]), ctx.ints([INT64_MAX])
    for _ in range(times):
        later = ctx.op.Slice(value, ctx.ints([1]), end, axis)
        earlier = ctx.op.Slice(value, ctx.ints([0]), ctx.ints([-1]), axis)
        value = ctx.op.Xor(later, earlier) if dtype == torch.bool else ctx.op.Sub(later, earlier)
    return value
