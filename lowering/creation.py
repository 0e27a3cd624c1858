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
