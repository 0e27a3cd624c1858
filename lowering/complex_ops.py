"""Complex tensors, which ONNX cannot hold, carried as real tensors with a trailing axis of 2.

A complex value of shape ``S`` is lowered as a real tensor of shape ``S + [2]`` (real part at
index 0, imaginary part at index 1): exactly ``torch.view_as_real``'s layout, so
``view_as_complex`` and ``view_as_real`` cost nothing. Whether a node's value is complex is read
from its traced value, so nothing needs tracking: a node that touches a complex tensor (as input
or output) is lowered by ``COMPLEX_LOWERINGS`` instead of the ordinary table.

Ops that only address leading axes by position (slice, select, unsqueeze, cat...) are correct on
the representation once their axes are made non-negative, which the ordinary lowerings do against
the traced (complex) rank; they are reused. Ops that see the whole shape (reshape, expand,
permute) or compute (mul, add) have their own lowering here.
"""

from __future__ import annotations

import operator
from typing import Any

import onnx_ir as ir
import torch
import torch.fx

from lowering import creation, shape, symbolic
from lowering.context import INT64, LoweringContext
from lowering.registry import LoweringFn, lowers

aten = torch.ops.aten

COMPLEX_LOWERINGS: dict[Any, LoweringFn] = {}


def is_complex(val: Any) -> bool:
    return isinstance(val, torch.Tensor) and val.is_complex()


def involves_complex(node: torch.fx.Node) -> bool:
    """Whether ``node`` reads or produces a complex tensor."""
    out = node.meta.get("val")
    outs = out if isinstance(out, (list, tuple)) else [out]
    if any(is_complex(v) for v in outs):
        return True
    return any(is_complex(a.meta.get("val")) for a in node.all_input_nodes)


def find_complex_lowering(target: Any) -> LoweringFn | None:
    fn = COMPLEX_LOWERINGS.get(target)
    if fn is None:
        fn = COMPLEX_LOWERINGS.get(getattr(target, "overloadpacket", None))
    return fn


def complex_lowers(*targets: Any):
    def register(fn: LoweringFn) -> LoweringFn:
        for target in targets:
            COMPLEX_LOWERINGS[target] = fn
        return fn

    return register


# axes addressed by position only: the ordinary lowering is right on the representation
complex_lowers(aten.slice)(shape.slice_)
complex_lowers(aten.narrow)(shape.narrow)
complex_lowers(aten.select)(shape.select)
complex_lowers(aten.unsqueeze)(shape.unsqueeze)
complex_lowers(aten.squeeze)(shape.squeeze)
complex_lowers(aten.cat, aten.concat, aten.concatenate)(shape.cat)
complex_lowers(aten.stack)(shape.stack)
complex_lowers(aten.split, aten.split_with_sizes, aten.chunk)(shape.split)
complex_lowers(aten.unbind)(shape.unbind)
complex_lowers(aten.contiguous, aten.clone, aten.alias, aten.detach, aten.lift_fresh_copy)(
    shape.identity
)
complex_lowers(aten._assert_tensor_metadata)(creation.no_op)
complex_lowers(operator.getitem)(symbolic.getitem)


def _real_dtype(ctx: LoweringContext, arg: Any) -> torch.dtype:
    return ctx.torch_dtype(arg).to_real()


def _last(ctx: LoweringContext) -> ir.Value:
    return ctx.op.Constant(value=ir.tensor([-1], dtype=INT64))


def _pair(ctx: LoweringContext, re: ir.Value, im: ir.Value) -> ir.Value:
    """The representation of ``re + i·im`` (two real tensors of the same shape)."""
    return ctx.op.Concat(
        ctx.op.Unsqueeze(re, _last(ctx)), ctx.op.Unsqueeze(im, _last(ctx)), axis=-1
    )


def _parts(ctx: LoweringContext, value: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Real and imaginary parts of a represented complex value."""
    re = ctx.op.Gather(value, ctx.op.Constant(value=ir.tensor(0, dtype=INT64)), axis=-1)
    im = ctx.op.Gather(value, ctx.op.Constant(value=ir.tensor(1, dtype=INT64)), axis=-1)
    return re, im


def as_complex(ctx: LoweringContext, arg: Any, real: torch.dtype) -> ir.Value:
    """``arg`` (complex, real tensor or Python number) as a represented complex value in ``real``."""
    if isinstance(arg, (complex, float, int, bool)):
        c = complex(arg)
        return ctx.constant([c.real, c.imag], real)
    if is_complex(ctx.val(arg)):
        value = ctx.value(arg)
        return value if _real_dtype(ctx, arg) == real else ctx.cast(value, real)
    value = ctx.value(arg, real)
    return _pair(ctx, value, ctx.op.Mul(value, ctx.constant(0.0, real)))


def _real_operand(ctx: LoweringContext, arg: Any, real: torch.dtype) -> ir.Value:
    """A real operand broadcast against a represented complex value (trailing axis added)."""
    if not isinstance(arg, torch.fx.Node):
        return ctx.constant(arg, real)
    return ctx.op.Unsqueeze(ctx.value(arg, real), _last(ctx))


@lowers(aten.view_as_complex, aten.view_as_real)
@complex_lowers(aten.view_as_complex, aten.view_as_real)
def view_as(ctx: LoweringContext, node: torch.fx.Node):
    """The representation is view_as_real's layout: both are the identity."""
    return ctx.value(node.args[0])


@lowers(aten.polar, aten.complex)
@complex_lowers(aten.polar, aten.complex)
def polar(ctx: LoweringContext, node: torch.fx.Node):
    """polar(abs, angle) = abs·(cos angle + i·sin angle); complex(re, im) = re + i·im."""
    real = ctx.out_dtype(node).to_real()
    a, b = ctx.value(node.args[0], real), ctx.value(node.args[1], real)
    if node.target.overloadpacket is aten.complex:
        return _pair(ctx, a, b)
    return _pair(ctx, ctx.op.Mul(a, ctx.op.Cos(b)), ctx.op.Mul(a, ctx.op.Sin(b)))


@complex_lowers(aten.real, aten.imag)
def real_imag(ctx: LoweringContext, node: torch.fx.Node):
    re, im = _parts(ctx, ctx.value(node.args[0]))
    return re if node.target.overloadpacket is aten.real else im


def _is_real(ctx: LoweringContext, arg: Any) -> bool:
    if isinstance(arg, torch.fx.Node):
        return not is_complex(ctx.val(arg))
    return not isinstance(arg, complex)


@complex_lowers(aten.mul)
def mul(ctx: LoweringContext, node: torch.fx.Node):
    """(a + ib)(c + id) = (ac - bd) + i(ad + bc); a real factor scales both parts."""
    real = ctx.out_dtype(node).to_real()
    x, y = node.args[0], node.args[1]
    if _is_real(ctx, x):
        x, y = y, x
    if _is_real(ctx, y):
        return ctx.op.Mul(as_complex(ctx, x, real), _real_operand(ctx, y, real))
    op = ctx.op
    a, b = _parts(ctx, as_complex(ctx, x, real))
    c, d = _parts(ctx, as_complex(ctx, y, real))
    return _pair(ctx, op.Sub(op.Mul(a, c), op.Mul(b, d)), op.Add(op.Mul(a, d), op.Mul(b, c)))


@complex_lowers(aten.div)
def div(ctx: LoweringContext, node: torch.fx.Node):
    """By a real divisor: both parts; else (a + ib)/(c + id) = (a + ib)(c - id)/(c² + d²)."""
    real = ctx.out_dtype(node).to_real()
    x, y = node.args[0], node.args[1]
    if node.kwargs.get("rounding_mode") is not None:
        raise NotImplementedError("complex division with a rounding mode")
    if _is_real(ctx, y):
        return ctx.op.Div(as_complex(ctx, x, real), _real_operand(ctx, y, real))
    op = ctx.op
    a, b = _parts(ctx, as_complex(ctx, x, real))
    c, d = _parts(ctx, as_complex(ctx, y, real))
    norm = op.Add(op.Mul(c, c), op.Mul(d, d))
    re = op.Div(op.Add(op.Mul(a, c), op.Mul(b, d)), norm)
    im = op.Div(op.Sub(op.Mul(b, c), op.Mul(a, d)), norm)
    return _pair(ctx, re, im)


@complex_lowers(aten.add, aten.sub)
def add_sub(ctx: LoweringContext, node: torch.fx.Node):
    real = ctx.out_dtype(node).to_real()
    a = as_complex(ctx, node.args[0], real)
    b = as_complex(ctx, node.args[1], real)
    alpha = node.kwargs.get("alpha", 1)
    if alpha != 1:
        b = ctx.op.Mul(b, ctx.constant(alpha, real))
    return ctx.op.Add(a, b) if node.target.overloadpacket is aten.add else ctx.op.Sub(a, b)


@complex_lowers(aten.neg)
def neg(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Neg(ctx.value(node.args[0]))


@complex_lowers(aten.conj, aten.conj_physical, aten._conj, aten.resolve_conj)
def conj(ctx: LoweringContext, node: torch.fx.Node):
    if node.target.overloadpacket is aten.resolve_conj:
        return ctx.value(node.args[0])
    sign = ctx.constant([1.0, -1.0], _real_dtype(ctx, node.args[0]))
    return ctx.op.Mul(ctx.value(node.args[0]), sign)


@complex_lowers(aten.view, aten.reshape, aten._unsafe_view)
def reshape(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Reshape(ctx.value(node.args[0]), ctx.ints([*node.args[1], 2]))


@complex_lowers(aten.flatten)
def flatten(ctx: LoweringContext, node: torch.fx.Node):
    """Axes ``start`` to ``end`` of the complex shape as one: a reshape to the leading sizes, -1,
    then the trailing sizes with the axis of 2 (read from the input's shape, so dynamic)."""
    x = node.args[0]
    rank = ctx.rank(x)
    start = (node.args[1] if len(node.args) > 1 else 0) % max(rank, 1)
    end = (node.args[2] if len(node.args) > 2 else -1) % max(rank, 1)
    value = ctx.value(x)
    head = ctx.op.Shape(value, start=0, end=start)
    tail = ctx.op.Shape(value, start=end + 1)
    return ctx.op.Reshape(value, ctx.op.Concat(head, ctx.ints([-1]), tail, axis=0))


@complex_lowers(aten.expand, aten.broadcast_to)
def expand(ctx: LoweringContext, node: torch.fx.Node):
    sizes = [1 if isinstance(s, int) and s == -1 else s for s in node.args[1]]
    return ctx.op.Expand(ctx.value(node.args[0]), ctx.ints([*sizes, 2]))


@complex_lowers(aten.transpose)
def transpose(ctx: LoweringContext, node: torch.fx.Node):
    x, a, b = node.args
    rank = ctx.rank(x)
    perm = list(range(rank + 1))
    perm[a % rank], perm[b % rank] = perm[b % rank], perm[a % rank]
    return ctx.op.Transpose(ctx.value(x), perm=perm)


@complex_lowers(aten.permute)
def permute(ctx: LoweringContext, node: torch.fx.Node):
    x, dims = node.args
    rank = ctx.rank(x)
    return ctx.op.Transpose(ctx.value(x), perm=[d % rank for d in dims] + [rank])


@complex_lowers(aten.to, aten._to_copy, aten.type_as)
def to(ctx: LoweringContext, node: torch.fx.Node):
    """Between complex precisions: cast both parts; complex to real keeps the real part (as torch)."""
    x, out = node.args[0], ctx.out_dtype(node)
    if out.is_complex:
        return as_complex(ctx, x, out.to_real())
    re, _ = _parts(ctx, ctx.value(x))
    return re if _real_dtype(ctx, x) == out else ctx.cast(re, out)


@complex_lowers(aten.repeat)
def repeat(ctx: LoweringContext, node: torch.fx.Node):
    x, repeats = node.args
    value, extra = ctx.value(x), len(repeats) - ctx.rank(x)
    if extra > 0:  # torch adds the new axes in front
        value = ctx.op.Unsqueeze(value, ctx.ints(list(range(extra))))
    return ctx.op.Tile(value, ctx.ints([*repeats, 1]))
