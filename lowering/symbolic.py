"""Symbolic sizes: sym_size and Python arithmetic on SymInts, as 0-d int64 tensors; getitem."""

from __future__ import annotations

import math
import operator

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.sym_size)
def sym_size(ctx: LoweringContext, node: torch.fx.Node):
    x, dim = node.args
    dim = dim % ctx.rank(x)
    return ctx.op.Squeeze(ctx.op.Shape(ctx.value(x), start=dim, end=dim + 1), ctx.ints([0]))


@lowers(aten.sym_numel)
def sym_numel(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Size(ctx.value(node.args[0]))


@lowers(aten._local_scalar_dense, aten.item)
def item(ctx: LoweringContext, node: torch.fx.Node):
    """tensor.item(): the one element as a 0-d tensor, in the type its (unbacked) symbol computes in."""
    return ctx.op.Reshape(ctx.value(node.args[0], ctx.torch_dtype(node)), ctx.ints([]))


@lowers(operator.getitem)
def getitem(ctx: LoweringContext, node: torch.fx.Node):
    container, index = node.args
    return ctx.env[container][index]


def _sym_dtype(ctx: LoweringContext, node: torch.fx.Node) -> torch.dtype:
    return ctx.torch_dtype(node)


def _sym_binary(onnx_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        dtype = ctx.promoted(*node.args)
        a, b = (ctx.value(arg, dtype) for arg in node.args)
        return getattr(ctx.op, onnx_op)(a, b)

    return lower


lowers(operator.add)(_sym_binary("Add"))
lowers(operator.sub)(_sym_binary("Sub"))
lowers(operator.mul)(_sym_binary("Mul"))
lowers(operator.eq)(_sym_binary("Equal"))
lowers(operator.lt)(_sym_binary("Less"))
lowers(operator.le)(_sym_binary("LessOrEqual"))
lowers(operator.gt)(_sym_binary("Greater"))
lowers(operator.ge)(_sym_binary("GreaterOrEqual"))
lowers(torch.sym_max)(_sym_binary("Max"))
lowers(torch.sym_min)(_sym_binary("Min"))
lowers(operator.and_)(_sym_binary("And"))
lowers(operator.or_)(_sym_binary("Or"))


@lowers(operator.ne)
def sym_ne(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Not(_sym_binary("Equal")(ctx, node))


@lowers(operator.truediv)
def sym_truediv(ctx: LoweringContext, node: torch.fx.Node):
    a, b = (ctx.value(arg, torch.float64) for arg in node.args)
    return ctx.op.Div(a, b)


@lowers(operator.floordiv)
def sym_floordiv(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.promoted(*node.args)
    a, b = (ctx.value(arg, torch.float64) for arg in node.args)
    return ctx.cast(ctx.op.Floor(ctx.op.Div(a, b)), dtype)


@lowers(operator.mod)
def sym_mod(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.promoted(*node.args)
    a, b = (ctx.value(arg, dtype) for arg in node.args)
    return ctx.op.Mod(a, b, fmod=1 if dtype.is_floating_point else 0)


@lowers(operator.neg)
def sym_neg(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Neg(ctx.value(node.args[0]))


@lowers(operator.pow)
def sym_pow(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.torch_dtype(node)
    a, b = (ctx.value(arg, torch.float64) for arg in node.args)
    return ctx.cast(ctx.op.Pow(a, b), dtype)


@lowers(torch.sym_float)
def sym_float(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.value(node.args[0], torch.float64)


@lowers(torch.sym_int, math.trunc)
def sym_int(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.value(node.args[0], torch.int64)


@lowers(math.ceil)
def sym_ceil(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.cast(ctx.op.Ceil(ctx.value(node.args[0], torch.float64)), torch.int64)


@lowers(math.floor)
def sym_floor(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.cast(ctx.op.Floor(ctx.value(node.args[0], torch.float64)), torch.int64)


@lowers(torch.sym_not, operator.not_)
def sym_not(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Not(ctx.value(node.args[0], torch.bool))


@lowers(torch.sym_ite)
def sym_ite(ctx: LoweringContext, node: torch.fx.Node):
    """``sym_ite(cond, a, b)``: ``a`` where the symbolic condition holds, else ``b``."""
    condition, then, otherwise = node.args
    dtype = ctx.torch_dtype(node)
    return ctx.op.Where(
        ctx.value(condition, torch.bool), ctx.value(then, dtype), ctx.value(otherwise, dtype)
    )
