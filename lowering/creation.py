"""Tensors made from sizes and fill values: arange, full, zeros, ones and their _like forms."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.dtypes import onnx_dtype
from lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.arange)
def arange(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    args = list(node.args)
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args + [1])[:3]
    # an integral arange casts (truncates) start, end and step to int first, as torch does
    compute = dtype if dtype.is_floating_point else torch.int64
    values = ctx.op.Range(*(_scalar(ctx, a, compute) for a in (start, end, step)))
    return values if compute == dtype else ctx.cast(values, dtype)


@lowers(aten.linspace)
def linspace(ctx: LoweringContext, node: torch.fx.Node):
    """torch's formula: ``start + i * step`` for the first half of the ``steps`` points and
    ``end - (steps - 1 - i) * step`` for the rest, ``step = (end - start) / (steps - 1)``
    (integers computed in float64 and truncated, as torch does); one point is ``start``."""
    start, end, steps = node.args[:3]
    dtype = ctx.out_dtype(node)
    compute = (
        torch.float32 if dtype in (torch.float16, torch.bfloat16, torch.float32) else torch.float64
    )
    first, last = _scalar(ctx, start, compute), _scalar(ctx, end, compute)
    count = _scalar(ctx, steps, torch.int64)
    index = ctx.op.Range(ctx.constant(0, torch.int64), count, ctx.constant(1, torch.int64))
    gaps = ctx.op.Max(ctx.op.Sub(count, ctx.constant(1, torch.int64)), ctx.constant(1, torch.int64))
    step = ctx.op.Div(ctx.op.Sub(last, first), ctx.cast(gaps, compute))
    from_start = ctx.op.Add(first, ctx.op.Mul(step, ctx.cast(index, compute)))
    back = ctx.op.Sub(ctx.op.Sub(count, ctx.constant(1, torch.int64)), index)
    from_end = ctx.op.Sub(last, ctx.op.Mul(step, ctx.cast(back, compute)))
    # torch's halfway is steps // 2; at least 1, so that one point is start
    halfway = ctx.op.Max(
        ctx.op.Div(count, ctx.constant(2, torch.int64)), ctx.constant(1, torch.int64)
    )
    values = ctx.op.Where(ctx.op.Less(index, halfway), from_start, from_end)
    return values if compute == dtype else ctx.cast(values, dtype)


def _scalar(ctx: LoweringContext, arg, dtype: torch.dtype):
    if isinstance(arg, torch.fx.Node):
        return ctx.op.Reshape(ctx.value(arg, dtype), ctx.ints([]))
    return ctx.constant(arg, dtype)


def _filled(ctx: LoweringContext, shape_value, fill, dtype: torch.dtype):
    if isinstance(fill, torch.fx.Node):  # a traced scalar: broadcast it
        return ctx.op.Expand(ctx.value(fill, dtype), shape_value)
    return ctx.op.ConstantOfShape(shape_value, value=_fill_value(fill, dtype))


def _fill_value(fill: object, dtype: torch.dtype) -> ir.TensorProtocol:
    """The one-element tensor ConstantOfShape repeats."""
    return ir.tensor(np.asarray([fill]).astype(onnx_dtype(dtype).numpy()))


@lowers(aten.full)
def full(ctx: LoweringContext, node: torch.fx.Node):
    return _filled(ctx, ctx.ints(node.args[0]), node.args[1], ctx.out_dtype(node))


@lowers(aten.zeros, aten.ones, aten.empty, aten.new_zeros, aten.new_ones, aten.new_empty)
def sized_fill(ctx: LoweringContext, node: torch.fx.Node):
    packet = node.target.overloadpacket
    sizes = (
        node.args[1] if packet in (aten.new_zeros, aten.new_ones, aten.new_empty) else node.args[0]
    )
    fill = 1 if packet in (aten.ones, aten.new_ones) else 0
    return _filled(ctx, ctx.ints(sizes), fill, ctx.out_dtype(node))


@lowers(aten.new_full)
def new_full(ctx: LoweringContext, node: torch.fx.Node):
    return _filled(ctx, ctx.ints(node.args[1]), node.args[2], ctx.out_dtype(node))


@lowers(aten.zeros_like, aten.ones_like, aten.empty_like, aten.full_like)
def filled_like(ctx: LoweringContext, node: torch.fx.Node):
    packet = node.target.overloadpacket
    fill = node.args[1] if packet is aten.full_like else 1 if packet is aten.ones_like else 0
    return _filled(ctx, ctx.op.Shape(ctx.value(node.args[0])), fill, ctx.out_dtype(node))


@lowers(aten.eye)
def eye(ctx: LoweringContext, node: torch.fx.Node):
    """``torch.eye(n, m=n)``: ones on the main diagonal of an n x m matrix."""
    rows = node.args[0]
    columns = node.args[1] if len(node.args) > 1 else rows
    dtype = ctx.out_dtype(node)
    compute = torch.float32 if dtype in (torch.bool, torch.bfloat16) else dtype
    zeros = ctx.op.ConstantOfShape(ctx.ints([rows, columns]), value=_fill_value(0, compute))
    ones = ctx.op.EyeLike(zeros)
    return ones if compute == dtype else ctx.cast(ones, dtype)


@lowers(aten.scalar_tensor)
def scalar_tensor(ctx: LoweringContext, node: torch.fx.Node):
    return _scalar(ctx, node.args[0], ctx.out_dtype(node))


@lowers(aten.fill)
def fill(ctx: LoweringContext, node: torch.fx.Node):
    return _filled(ctx, ctx.op.Shape(ctx.value(node.args[0])), node.args[1], ctx.out_dtype(node))


@lowers(
    aten.to,
    aten._to_copy,
    aten.type_as,
    aten._to_dtype_layout if hasattr(aten, "_to_dtype_layout") else aten.to,
)
def to(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    dtype = ctx.out_dtype(node)
    if ctx.torch_dtype(x) == dtype:
        return ctx.value(x)
    return ctx.cast(ctx.value(x), dtype)


@lowers(
    aten._assert_tensor_metadata,
    aten._assert_scalar,
    aten.sym_constrain_range_for_size,
    aten.sym_constrain_range,
    aten._assert_async,
)
def no_op(ctx: LoweringContext, node: torch.fx.Node):
    return None
