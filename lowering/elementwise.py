"""Elementwise arithmetic, comparisons, logic, unary math and activations."""

from __future__ import annotations

import math

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten

_BINARY = {
    aten.add: "Add",
    aten.sub: "Sub",
    aten.subtract: "Sub",
    aten.mul: "Mul",
    aten.multiply: "Mul",
    aten.maximum: "Max",
    aten.minimum: "Min",
}
# ONNX's arithmetic takes no bool; on bools torch's product and minimum are a logical and, its
# sum and maximum a logical or
_ON_BOOL = {"Mul": "And", "Min": "And", "Add": "Or", "Max": "Or"}
_COMPARE = {
    aten.eq: "Equal",
    aten.lt: "Less",
    aten.gt: "Greater",
    aten.le: "LessOrEqual",
    aten.ge: "GreaterOrEqual",
}
_UNARY = {
    aten.neg: "Neg",
    aten.abs: "Abs",
    aten.sqrt: "Sqrt",
    aten.exp: "Exp",
    aten.log: "Log",
    aten.sin: "Sin",
    aten.cos: "Cos",
    aten.tan: "Tan",
    aten.asin: "Asin",
    aten.acos: "Acos",
    aten.sinh: "Sinh",
    aten.cosh: "Cosh",
    aten.asinh: "Asinh",
    aten.acosh: "Acosh",
    aten.atanh: "Atanh",
    aten.tanh: "Tanh",
    aten.sigmoid: "Sigmoid",
    aten.relu: "Relu",
    aten.erf: "Erf",
    aten.reciprocal: "Reciprocal",
    aten.floor: "Floor",
    aten.ceil: "Ceil",
    aten.round: "Round",
    aten.sign: "Sign",
    aten.isnan: "IsNaN",
}


def _operands(ctx: LoweringContext, node: torch.fx.Node, dtype: torch.dtype):
    a, b = node.args[0], node.args[1]
    return ctx.value(a, dtype), ctx.value(b, dtype)


def _binary(onnx_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        dtype = ctx.out_dtype(node)
        if dtype == torch.bool:
            return getattr(ctx.op, _ON_BOOL[onnx_op])(*_operands(ctx, node, dtype))
        # bfloat16 arithmetic is computed in float32 and rounded once, as torch does on CPU
        # (and onnxruntime's CPU kernels have no bfloat16 Add/Mul)
        compute = torch.float32 if dtype == torch.bfloat16 else dtype
        a, b = _operands(ctx, node, compute)
        alpha = node.kwargs.get("alpha", 1)
        if alpha != 1:
            b = ctx.op.Mul(b, ctx.constant(alpha, compute))
        out = getattr(ctx.op, onnx_op)(a, b)
        return out if compute == dtype else ctx.cast(out, dtype)

    return lower


for _packet, _onnx in _BINARY.items():
    lowers(_packet)(_binary(_onnx))


@lowers(aten.rsub)
def rsub(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    a, b = _operands(ctx, node, dtype)
    alpha = node.kwargs.get("alpha", 1)
    if alpha != 1:
        a = ctx.op.Mul(a, ctx.constant(alpha, dtype))
    return ctx.op.Sub(b, a)


@lowers(aten.div, aten.divide, aten.true_divide)
def div(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
    if mode is None:
        a, b = _operands(ctx, node, dtype)
        return ctx.op.Div(a, b)
    return _rounded_div(ctx, node.args[0], node.args[1], mode, dtype)


def _rounded_div(ctx: LoweringContext, a_arg, b_arg, mode: str, dtype: torch.dtype):
    if dtype.is_floating_point:
        q = ctx.op.Div(ctx.value(a_arg, dtype), ctx.value(b_arg, dtype))
        return ctx.op.Floor(q) if mode == "floor" else _trunc(ctx, q)
    # integers: ONNX Div truncates; floor needs a correction when signs differ and there is a remainder
    a, b = ctx.value(a_arg, dtype), ctx.value(b_arg, dtype)
    q = ctx.op.Div(a, b)
    if mode == "trunc":
        return q
    zero = ctx.constant(0, dtype)
    has_rem = ctx.op.Not(ctx.op.Equal(ctx.op.Mod(a, b, fmod=1), zero))
    signs_differ = ctx.op.Xor(ctx.op.Less(a, zero), ctx.op.Less(b, zero))
    return ctx.op.Sub(q, ctx.op.CastLike(ctx.op.And(has_rem, signs_differ), q))


@lowers(aten.floor_divide)
def floor_divide(ctx: LoweringContext, node: torch.fx.Node):
    return _rounded_div(ctx, node.args[0], node.args[1], "floor", ctx.out_dtype(node))


@lowers(aten.remainder)
def remainder(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    a, b = _operands(ctx, node, dtype)
    if dtype.is_floating_point:  # python-style modulo: result takes the divisor's sign
        return ctx.op.Sub(a, ctx.op.Mul(ctx.op.Floor(ctx.op.Div(a, b)), b))
    return ctx.op.Mod(a, b)


@lowers(aten.fmod)
def fmod(ctx: LoweringContext, node: torch.fx.Node):
    # C-style remainder (the dividend's sign); ONNX Mod needs fmod=1 for floats and gives it for ints.
    return ctx.op.Mod(*_operands(ctx, node, ctx.out_dtype(node)), fmod=1)


@lowers(aten.pow)
def pow_(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    base, exponent = node.args[0], node.args[1]
    if exponent == 2:
        x = ctx.value(base, dtype)
        return ctx.op.Mul(x, x)
    return ctx.op.Pow(ctx.value(base, dtype), ctx.value(exponent, dtype))


def _compare(onnx_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        dtype = ctx.promoted(node.args[0], node.args[1])
        a, b = _operands(ctx, node, dtype)
        return getattr(ctx.op, onnx_op)(a, b)

    return lower


for _packet, _onnx in _COMPARE.items():
    lowers(_packet)(_compare(_onnx))


@lowers(aten.ne)
def ne(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.promoted(node.args[0], node.args[1])
    return ctx.op.Not(ctx.op.Equal(*_operands(ctx, node, dtype)))


def _logic(bool_op: str, int_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        dtype = ctx.out_dtype(node)
        a, b = _operands(ctx, node, dtype)
        return getattr(ctx.op, bool_op if dtype == torch.bool else int_op)(a, b)

    return lower


lowers(aten.__and__, aten.bitwise_and, aten.logical_and)(_logic("And", "BitwiseAnd"))
lowers(aten.__or__, aten.bitwise_or, aten.logical_or)(_logic("Or", "BitwiseOr"))
lowers(aten.__xor__, aten.bitwise_xor, aten.logical_xor)(_logic("Xor", "BitwiseXor"))


@lowers(aten.bitwise_not, aten.logical_not)
def not_(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    if ctx.torch_dtype(x) == torch.bool or node.target.overloadpacket is aten.logical_not:
        return ctx.op.Not(ctx.value(x, torch.bool))
    return ctx.op.BitwiseNot(ctx.value(x))


def _unary(onnx_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        return getattr(ctx.op, onnx_op)(
            ctx.value(node.args[0], ctx.out_dtype(node) if onnx_op != "IsNaN" else None)
        )

    return lower


for _packet, _onnx in _UNARY.items():
    lowers(_packet)(_unary(_onnx))


@lowers(aten.isinf)
def isinf(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.IsInf(ctx.value(node.args[0]))


@lowers(aten.isfinite)
def isfinite(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    if not ctx.torch_dtype(x).is_floating_point:  # integers and bools are always finite
        return ctx.op.Expand(ctx.constant(True, torch.bool), ctx.op.Shape(ctx.value(x)))
    value = ctx.value(x)
    return ctx.op.Not(ctx.op.Or(ctx.op.IsNaN(value), ctx.op.IsInf(value)))


@lowers(aten.nan_to_num)
def nan_to_num(ctx: LoweringContext, node: torch.fx.Node):
    """NaN -> ``nan`` (0), +Inf -> ``posinf`` and -Inf -> ``neginf`` (the dtype's largest and
    smallest finite values by default); integers pass unchanged."""
    x, dtype = node.args[0], ctx.out_dtype(node)
    if not dtype.is_floating_point:
        return ctx.value(x)
    args = list(node.args[1:]) + [None] * 3
    nan = node.kwargs.get("nan", args[0])
    posinf = node.kwargs.get("posinf", args[1])
    neginf = node.kwargs.get("neginf", args[2])
    info = torch.finfo(dtype)
    value = ctx.value(x)
    value = ctx.op.Where(ctx.op.IsNaN(value), ctx.constant(nan or 0.0, dtype), value)
    high = ctx.constant(info.max if posinf is None else posinf, dtype)
    value = ctx.op.Where(ctx.op.IsInf(value, detect_negative=0), high, value)
    low = ctx.constant(info.min if neginf is None else neginf, dtype)
    return ctx.op.Where(ctx.op.IsInf(value, detect_positive=0), low, value)


@lowers(aten.square)
def square(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    compute = torch.float32 if dtype == torch.bfloat16 else dtype  # as _binary's Mul
    x = ctx.value(node.args[0], compute)  # a bool squares to int64
    out = ctx.op.Mul(x, x)
    return out if compute == dtype else ctx.cast(out, dtype)


@lowers(aten.rsqrt)
def rsqrt(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Reciprocal(ctx.op.Sqrt(ctx.value(node.args[0], ctx.out_dtype(node))))


def _trunc(ctx: LoweringContext, x):
    return ctx.op.Mul(ctx.op.Floor(ctx.op.Abs(x)), ctx.op.Sign(x))


@lowers(aten.trunc)
def trunc(ctx: LoweringContext, node: torch.fx.Node):
    return _trunc(ctx, ctx.value(node.args[0]))


@lowers(aten.silu)
def silu(ctx: LoweringContext, node: torch.fx.Node):
    x = ctx.value(node.args[0])
    return ctx.op.Mul(x, ctx.op.Sigmoid(x))


@lowers(aten.gelu)
def gelu(ctx: LoweringContext, node: torch.fx.Node):
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return ctx.op.Gelu(ctx.value(node.args[0]), approximate=approximate)


@lowers(aten.softplus)
def softplus(ctx: LoweringContext, node: torch.fx.Node):
    x = ctx.value(node.args[0])
    beta = node.args[1] if len(node.args) > 1 else 1
    threshold = node.args[2] if len(node.args) > 2 else 20
    dtype = ctx.out_dtype(node)
    scaled = ctx.op.Mul(x, ctx.constant(beta, dtype)) if beta != 1 else x
    soft = ctx.op.Softplus(scaled)
    if beta != 1:
        soft = ctx.op.Div(soft, ctx.constant(beta, dtype))
    return ctx.op.Where(ctx.op.Greater(scaled, ctx.constant(threshold, dtype)), x, soft)


@lowers(aten.log_sigmoid)
def log_sigmoid(ctx: LoweringContext, node: torch.fx.Node):
    """``log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|))``: no overflow at either end."""
    x = ctx.value(node.args[0], ctx.out_dtype(node))
    zero = ctx.op.CastLike(ctx.constant(0.0, torch.float32), x)
    tail = ctx.op.Log(
        ctx.op.Add(
            ctx.op.Exp(ctx.op.Neg(ctx.op.Abs(x))),
            ctx.op.CastLike(ctx.constant(1.0, torch.float32), x),
        )
    )
    return ctx.op.Sub(ctx.op.Min(x, zero), tail)


@lowers(aten.leaky_relu)
def leaky_relu(ctx: LoweringContext, node: torch.fx.Node):
    slope = node.args[1] if len(node.args) > 1 else 0.01
    return ctx.op.LeakyRelu(ctx.value(node.args[0]), alpha=float(slope))


@lowers(aten.elu)
def elu(ctx: LoweringContext, node: torch.fx.Node):
    alpha = node.args[1] if len(node.args) > 1 else 1.0
    return ctx.op.Elu(ctx.value(node.args[0]), alpha=float(alpha))


@lowers(aten.mish)
def mish(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Mish(ctx.value(node.args[0]))


@lowers(aten.hardtanh)
def hardtanh(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    lo = node.args[1] if len(node.args) > 1 else -1.0
    hi = node.args[2] if len(node.args) > 2 else 1.0
    return ctx.op.Clip(ctx.value(node.args[0]), ctx.constant(lo, dtype), ctx.constant(hi, dtype))


@lowers(aten.clamp, aten.clip, aten.clamp_min, aten.clamp_max)
def clamp(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    x = ctx.value(node.args[0], dtype)
    packet = node.target.overloadpacket
    if packet is aten.clamp_min:
        lo, hi = node.args[1], None
    elif packet is aten.clamp_max:
        lo, hi = None, node.args[1]
    else:
        lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
        hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    if lo is not None:
        x = ctx.op.Max(x, ctx.value(lo, dtype))
    if hi is not None:
        x = ctx.op.Min(x, ctx.value(hi, dtype))
    return x


def _select(ctx: LoweringContext, cond, a, b, dtype: torch.dtype):
    """``Where``; on booleans ``(c and a) or (not c and b)``: onnxruntime's CPU ``Where`` has no
    boolean kernel (diffusers' HunyuanVideo fills a boolean attention mask)."""
    cond, a, b = ctx.value(cond, torch.bool), ctx.value(a, dtype), ctx.value(b, dtype)
    if dtype == torch.bool:
        return ctx.op.Or(ctx.op.And(cond, a), ctx.op.And(ctx.op.Not(cond), b))
    return ctx.op.Where(cond, a, b)


@lowers(aten.where)
def where(ctx: LoweringContext, node: torch.fx.Node):
    cond, a, b = node.args
    return _select(ctx, cond, a, b, ctx.out_dtype(node))


@lowers(aten.masked_fill)
def masked_fill(ctx: LoweringContext, node: torch.fx.Node):
    x, mask, fill = node.args
    return _select(ctx, mask, fill, x, ctx.out_dtype(node))


@lowers(aten.lerp)
def lerp(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    start, end, weight = (ctx.value(a, dtype) for a in node.args[:3])
    return ctx.op.Add(start, ctx.op.Mul(weight, ctx.op.Sub(end, start)))


@lowers(aten.atan)
def atan(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Atan(ctx.value(node.args[0], ctx.out_dtype(node)))


@lowers(aten.log1p)
def log1p(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    return ctx.op.Log(ctx.op.Add(ctx.value(node.args[0], dtype), ctx.constant(1.0, dtype)))


@lowers(aten.expm1)
def expm1(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    return ctx.op.Sub(ctx.op.Exp(ctx.value(node.args[0], dtype)), ctx.constant(1.0, dtype))


@lowers(aten.log2)
def log2(ctx: LoweringContext, node: torch.fx.Node):
    dtype = ctx.out_dtype(node)
    return ctx.op.Div(
        ctx.op.Log(ctx.value(node.args[0], dtype)), ctx.constant(math.log(2.0), dtype)
    )
