"""Pooling over windows: MaxPool, AveragePool (2-D, and 3-D without ceil_mode or a divisor), and
adaptive average pooling to a grid."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.dtypes import onnx_dtype
from lowering.linalg import _pairs
from lowering.registry import lowers

aten = torch.ops.aten


def _window(ctx: LoweringContext, node: torch.fx.Node) -> dict[str, list[int]]:
    """kernel_shape, strides (default: the kernel) and symmetric pads of a pooling call."""
    args = list(node.args)
    spatial = ctx.rank(args[0]) - 2
    kernel = _pairs(args[1], spatial)
    stride = _pairs(args[2], spatial) if len(args) > 2 and args[2] else kernel
    pads = _pairs(args[3] if len(args) > 3 else 0, spatial)
    return {"kernel_shape": kernel, "strides": stride, "pads": pads + pads}


@lowers(aten.max_pool2d, aten.max_pool2d_with_indices)
def max_pool(ctx: LoweringContext, node: torch.fx.Node):
    args = list(node.args) + [None] * 6
    spatial = ctx.rank(args[0]) - 2
    dilations = _pairs(args[4] if args[4] is not None else 1, spatial)
    if args[5]:
        out = _max_pool_ceil(ctx, node, dilations)
    else:
        out = ctx.op.MaxPool(ctx.value(args[0]), dilations=dilations, **_window(ctx, node))
    if node.target.overloadpacket is not aten.max_pool2d_with_indices:
        return out
    if any(user.args[1] == 1 and user.users for user in node.users):
        raise NotImplementedError("max pooling's indices")
    return out, out  # the indices are never read


def _max_pool_ceil(ctx: LoweringContext, node: torch.fx.Node, dilations: list[int]):
    """``ceil_mode``: the input padded with the lowest value up to the last window's end (torch
    drops a window that would start in the right padding), then MaxPool without pads."""
    x = node.args[0]
    shape = list(x.meta["val"].shape)
    if ctx.rank(x) != 4 or dilations != [1, 1]:
        raise NotImplementedError("max pooling with ceil_mode of a rank other than 4, or dilated")
    window = _window(ctx, node)
    lowest = ctx.constant(torch.finfo(ctx.out_dtype(node)).min, ctx.out_dtype(node))
    if not all(isinstance(d, int) for d in shape[2:]):
        if any(window["pads"]):
            raise NotImplementedError("max pooling with ceil_mode and padding, dynamic size")
        padded = ctx.op.Pad(ctx.value(x), _whole_windows(ctx, ctx.value(x), window), lowest)
        return ctx.op.MaxPool(
            padded, kernel_shape=window["kernel_shape"], strides=window["strides"]
        )
    pads_after = []
    for axis, length in enumerate(shape[2:]):
        k, s, p = window["kernel_shape"][axis], window["strides"][axis], window["pads"][axis]
        out = _ceil_windows(length, k, s, p)
        pads_after.append(max(0, (out - 1) * s + k - length - p))
    pads = [0, 0, *window["pads"][:2], 0, 0, *pads_after]
    padded = ctx.op.Pad(ctx.value(x), ctx.constant(pads), lowest)
    return ctx.op.MaxPool(padded, kernel_shape=window["kernel_shape"], strides=window["strides"])


@lowers(aten.avg_pool2d, aten.avg_pool3d)
def avg_pool(ctx: LoweringContext, node: torch.fx.Node):
    args = list(node.args) + [None] * 7
    ceil_mode, count_include_pad, divisor = args[4], args[5], args[6]
    include = True if count_include_pad is None else bool(count_include_pad)
    if ceil_mode or divisor is not None:
        return _avg_pool_exact(ctx, node, include, divisor)
    return ctx.op.AveragePool(
        ctx.value(args[0]), count_include_pad=int(include), **_window(ctx, node)
    )


def _ceil_windows(length: int, kernel: int, stride: int, pad: int) -> int:
    """torch's output length with ceil_mode: one more window where the division is not exact,
    unless that window would start inside the right padding."""
    out = -(-(length + 2 * pad - kernel) // stride) + 1
    return out - 1 if (out - 1) * stride >= length + pad else out


def _divisors(length: int, kernel: int, stride: int, pad: int, out: int, include: bool):
    """torch's per-window element count along one axis: the window clipped to the padded input
    (count_include_pad) or to the input itself."""
    counts = []
    for i in range(out):
        start = i * stride - pad
        end = min(start + kernel, length + pad)
        counts.append(end - start if include else min(end, length) - max(start, 0))
    return counts


def _avg_pool_exact(ctx: LoweringContext, node: torch.fx.Node, include: bool, divisor):
    """``ceil_mode`` or ``divisor_override``: ONNX's AveragePool places and divides the last,
    partial window differently from torch (and across opsets), so the windows are made whole
    instead: zero padding on both sides up to the last window's end (the kernel cut to the
    padded input, which changes no sum), AveragePool without pads (sum / kernel area), then
    times ``area / torch's divisor`` per output cell, a constant of the static image size."""
    x = node.args[0]
    shape = list(x.meta["val"].shape)
    if ctx.rank(x) == 4 and not all(isinstance(d, int) for d in shape[2:]):
        return _avg_pool_ceil_dynamic(ctx, node, divisor)
    if ctx.rank(x) != 4:
        raise NotImplementedError("average pooling with ceil_mode of a rank other than 4")
    window = _window(ctx, node)
    kernels, pads_after, scales = [], [], []
    for axis, length in enumerate(shape[2:]):
        k, s, p = window["kernel_shape"][axis], window["strides"][axis], window["pads"][axis]
        k = min(k, length + 2 * p)  # a kernel wider than the input: only its output cell is 1
        out = _ceil_windows(length, k, s, p) if node.args[4] else (length + 2 * p - k) // s + 1
        kernels.append(k)
        pads_after.append(max(0, (out - 1) * s + k - length - p))
        scales.append(_divisors(length, k, s, p, out, include))
    pads = [0, 0, *window["pads"][:2], 0, 0, *pads_after]
    padded = ctx.op.Pad(ctx.value(x), ctx.constant(pads))
    means = ctx.op.AveragePool(padded, kernel_shape=kernels, strides=window["strides"])
    area = kernels[0] * kernels[1]
    if divisor is not None:
        factor = [[area / divisor] * len(scales[1])] * len(scales[0])
    else:
        factor = [[area / (h * w) for w in scales[1]] for h in scales[0]]
    return ctx.op.Mul(means, ctx.constant(factor, ctx.out_dtype(node)))


def _whole_windows(ctx: LoweringContext, x: ir.Value, window: dict[str, list[int]]) -> ir.Value:
    """ONNX ``Pad`` pads that extend a dynamic 4-D input at the end of each spatial axis to whole
    windows: ``(stride - (length - kernel) % stride) % stride`` (no padding before)."""
    shape = ctx.op.Shape(x)
    extras = []
    for axis in range(2):
        k, stride = window["kernel_shape"][axis], window["strides"][axis]
        length = ctx.op.Gather(shape, ctx.constant([2 + axis]))
        over = ctx.op.Mod(ctx.op.Sub(length, ctx.constant([k])), ctx.constant([stride]))
        extras.append(ctx.op.Mod(ctx.op.Sub(ctx.constant([stride]), over), ctx.constant([stride])))
    return ctx.op.Concat(ctx.constant([0, 0, 0, 0, 0, 0]), *extras, axis=0)


def _avg_pool_ceil_dynamic(ctx: LoweringContext, node: torch.fx.Node, divisor):
    """``ceil_mode`` without padding on a dynamic image size (Funnel's sequence pooling): the
    input and a mask of ones are zero-padded at the end up to whole windows (by
    ``(stride - (length - kernel) % stride) % stride``, from the input's shape), and the mean of
    the input over the mean of the mask is torch's: the sum over the cells inside the input,
    divided by their count (without padding torch clips the last window to the input)."""
    window = _window(ctx, node)
    if divisor is not None or any(window["pads"]):
        raise NotImplementedError(
            "average pooling with ceil_mode and padding or a divisor on a dynamic image size"
        )
    x = ctx.value(node.args[0])
    pads = _whole_windows(ctx, x, window)
    spatial = ctx.op.Gather(ctx.op.Shape(x), ctx.constant([2, 3]))
    dtype = ctx.out_dtype(node)
    ones = ctx.op.ConstantOfShape(
        ctx.op.Concat(ctx.constant([1, 1]), spatial, axis=0),
        value=ir.tensor(np.ones(1, dtype=onnx_dtype(dtype).numpy())),
    )
    pool = {"kernel_shape": window["kernel_shape"], "strides": window["strides"]}
    sums = ctx.op.AveragePool(ctx.op.Pad(x, pads), **pool)
    counts = ctx.op.AveragePool(ctx.op.Pad(ones, pads), **pool)
    return ctx.op.Div(sums, counts)


@lowers(aten.adaptive_avg_pool1d, aten.adaptive_avg_pool2d, aten._adaptive_avg_pool2d)
def adaptive_avg_pool(ctx: LoweringContext, node: torch.fx.Node):
    """To one cell per channel (``AdaptiveAvgPool2d(1)``, the usual classifier pooling), or to a
    grid over a static input: one AveragePool where the grid divides it, else each cell's
    rows and then columns averaged (torch's overlapping cells); over a dynamic input, each axis
    by a matrix of torch's cells (``_cell_weights``). 1-D pooling (an audio VAE's) is the same
    over the last axis only."""
    spatial = 1 if node.target == aten.adaptive_avg_pool1d.default else 2
    size = node.args[1]
    sizes = list(size) if isinstance(size, (list, tuple)) else [size] * spatial
    x, rank = ctx.value(node.args[0]), ctx.rank(node.args[0])
    batched = rank == spatial + 2  # [N, C, ...]: ONNX's pooling layout
    axes = list(range(rank - spatial, rank))
    if all(s == 1 for s in sizes):
        if batched:
            return ctx.op.GlobalAveragePool(x)
        return ctx.op.ReduceMean(x, ctx.ints(axes), keepdims=1)
    shape = list(node.args[0].meta["val"].shape)[-spatial:]
    if not all(isinstance(d, int) for d in shape):
        dtype = ctx.out_dtype(node)
        out = x
        if spatial == 2:
            out = ctx.op.MatMul(_cell_weights(ctx, x, rank - 2, sizes[0], dtype), out)
        columns = _cell_weights(ctx, x, rank - 1, sizes[-1], dtype)
        return ctx.op.MatMul(out, ctx.op.Transpose(columns, perm=[1, 0]))
    if batched and all(d % s == 0 for d, s in zip(shape, sizes, strict=True)):
        kernel = [d // s for d, s in zip(shape, sizes, strict=True)]  # whole windows side by side
        return ctx.op.AveragePool(x, kernel_shape=kernel, strides=kernel)
    # torch's cells: rows floor(i * in / out) to ceil((i + 1) * in / out), one axis at a time
    out = x
    for axis, length, cells in zip(axes, shape, sizes, strict=True):
        parts = []
        for i in range(cells):
            start, end = (i * length) // cells, -((-(i + 1) * length) // cells)
            part = ctx.op.Slice(out, ctx.ints([start]), ctx.ints([end]), ctx.ints([axis]))
            parts.append(ctx.op.ReduceMean(part, ctx.ints([axis]), keepdims=1))
        out = ctx.op.Concat(*parts, axis=axis)
    return out


def _cell_weights(ctx: LoweringContext, x: ir.Value, axis: int, cells: int, dtype) -> ir.Value:
    """``[cells, length]``: row i averages torch's cell i of ``x``'s dynamic axis ``axis``,
    positions ``floor(i * length / cells)`` to ``ceil((i + 1) * length / cells)`` (exclusive)."""
    length = ctx.op.Shape(x, start=axis, end=axis + 1)
    index = ctx.constant([[i] for i in range(cells)], torch.int64)
    count = ctx.constant([cells])
    start = ctx.op.Div(ctx.op.Mul(index, length), count)
    end = ctx.op.Div(
        ctx.op.Add(
            ctx.op.Mul(ctx.op.Add(index, ctx.constant([1])), length), ctx.constant([cells - 1])
        ),
        count,
    )
    positions = ctx.op.Range(
        ctx.constant(0), ctx.op.Squeeze(length, ctx.constant([0])), ctx.constant(1)
    )
    inside = ctx.op.And(
        ctx.op.GreaterOrEqual(positions, start), ctx.op.Less(positions, end)
    )  # [cells, length] by broadcasting
    width = ctx.cast(ctx.op.Sub(end, start), dtype)
    return ctx.op.Div(ctx.cast(inside, dtype), width)
