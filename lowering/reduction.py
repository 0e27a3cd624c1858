"""Reductions over axes: mean, sum, max/min, arg-reductions, softmax, cumsum, top-k, norms."""

from __future__ import annotations

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten


def _axes(ctx: LoweringContext, x, dims) -> list[int] | None:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    rank = max(ctx.rank(x), 1)
    dims = [dims] if isinstance(dims, int) else dims
    return [d % rank for d in dims]


def _reduce(
    onnx_op: str, ctx: LoweringContext, node: torch.fx.Node, dims, keepdim: bool, dtype: torch.dtype
):
    x = node.args[0]
    axes = _axes(ctx, x, dims)
    value = ctx.value(x, dtype)
    if axes is None:
        return getattr(ctx.op, onnx_op)(value, keepdims=int(keepdim))
    return getattr(ctx.op, onnx_op)(value, ctx.ints(axes), keepdims=int(keepdim))


def _dims_keepdim(node: torch.fx.Node):
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    return dims, keepdim


@lowers(aten.mean)
def mean(ctx: LoweringContext, node: torch.fx.Node):
    dims, keepdim = _dims_keepdim(node)
    return _reduce("ReduceMean", ctx, node, dims, keepdim, ctx.out_dtype(node))


@lowers(aten.sum)
def sum_(ctx: LoweringContext, node: torch.fx.Node):
    dims, keepdim = _dims_keepdim(node)
    if isinstance(dims, torch.dtype):  # sum(x, dtype)
        dims, keepdim = None, False
    return _reduce("ReduceSum", ctx, node, dims, keepdim, ctx.out_dtype(node))


@lowers(aten.prod)
def prod(ctx: LoweringContext, node: torch.fx.Node):
    dims, keepdim = _dims_keepdim(node)
    dims = None if isinstance(dims, torch.dtype) else dims
    return _reduce("ReduceProd", ctx, node, dims, keepdim, ctx.out_dtype(node))


@lowers(aten.amax)
def amax(ctx: LoweringContext, node: torch.fx.Node):
    dims, keepdim = _dims_keepdim(node)
    return _reduce("ReduceMax", ctx, node, dims, keepdim, ctx.out_dtype(node))


@lowers(aten.amin)
def amin(ctx: LoweringContext, node: torch.fx.Node):
    dims, keepdim = _dims_keepdim(node)
    return _reduce("ReduceMin", ctx, node, dims, keepdim, ctx.out_dtype(node))


def _any_all(onnx_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        dims, keepdim = _dims_keepdim(node)
        x = node.args[0]
        axes = _axes(ctx, x, dims)
        # truth first: casting 0.5 straight to int would read as false
        value = ctx.cast(ctx.value(x, torch.bool), torch.int64)
        axes_in = [ctx.ints(axes)] if axes is not None else []
        return ctx.cast(
            getattr(ctx.op, onnx_op)(value, *axes_in, keepdims=int(keepdim)), torch.bool
        )

    return lower


lowers(aten.any)(_any_all("ReduceMax"))
lowers(aten.all)(_any_all("ReduceMin"))


def _max_min(reduce_op: str, arg_op: str, binary_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        x = node.args[0]
        if len(node.args) > 1 and isinstance(node.args[1], torch.fx.Node):  # elementwise max(a, b)
            dtype = ctx.out_dtype(node)
            return getattr(ctx.op, binary_op)(ctx.value(x, dtype), ctx.value(node.args[1], dtype))
        if len(node.args) == 1:
            return getattr(ctx.op, reduce_op)(ctx.value(x), keepdims=0)
        dim = node.args[1] % max(ctx.rank(x), 1)
        keepdim = bool(node.args[2]) if len(node.args) > 2 else False
        values = getattr(ctx.op, reduce_op)(ctx.value(x), ctx.ints([dim]), keepdims=int(keepdim))
        indices = getattr(ctx.op, arg_op)(
            ctx.value(x), axis=dim, keepdims=int(keepdim), select_last_index=0
        )
        return values, indices

    return lower


lowers(aten.max)(_max_min("ReduceMax", "ArgMax", "Max"))
lowers(aten.min)(_max_min("ReduceMin", "ArgMin", "Min"))


def _arg(onnx_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        x = node.args[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        value = ctx.value(x)
        if dim is None:
            value, dim = ctx.op.Reshape(value, ctx.ints([-1])), 0
        return getattr(ctx.op, onnx_op)(
            value, axis=dim % max(ctx.rank(x), 1), keepdims=int(keepdim)
        )

    return lower


lowers(aten.argmax)(_arg("ArgMax"))
lowers(aten.argmin)(_arg("ArgMin"))


def _softmax(onnx_op: str):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        x, dim = node.args[0], node.args[1]
        dtype = ctx.out_dtype(node)
        return getattr(ctx.op, onnx_op)(ctx.value(x, dtype), axis=dim % max(ctx.rank(x), 1))

    return lower


lowers(aten.softmax, aten._softmax)(_softmax("Softmax"))
lowers(aten.log_softmax, aten._log_softmax)(_softmax("LogSoftmax"))


@lowers(aten.logsumexp)
def logsumexp(ctx: LoweringContext, node: torch.fx.Node):
    dims, keepdim = _dims_keepdim(node)
    return _reduce("ReduceLogSumExp", ctx, node, dims, keepdim, ctx.out_dtype(node))


@lowers(aten.cumsum)
def cumsum(ctx: LoweringContext, node: torch.fx.Node):
    x, dim = node.args[0], node.args[1]
    dtype = ctx.out_dtype(node)
    return ctx.op.CumSum(ctx.value(x, dtype), ctx.scalar_int(dim % max(ctx.rank(x), 1)))


@lowers(aten.topk)
def topk(ctx: LoweringContext, node: torch.fx.Node):
    x, k = node.args[0], node.args[1]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", -1)
    largest = node.args[3] if len(node.args) > 3 else node.kwargs.get("largest", True)
    values, indices = ctx.op.TopK(
        ctx.value(x),
        ctx.ints([k]),
        axis=dim % ctx.rank(x),
        largest=int(largest),
        sorted=1,
        _outputs=2,
    )
    return values, indices


def _orderable(ctx: LoweringContext, x: torch.fx.Node):
    """``x`` as ``TopK`` takes it: a bool as int64 (TopK orders numbers only; False < True)."""
    return ctx.value(x, torch.int64 if ctx.torch_dtype(x) == torch.bool else None)


def _as_input(ctx: LoweringContext, x: torch.fx.Node, values):
    """Sorted ``values`` back in ``x``'s type (a bool, ordered as int64)."""
    return ctx.cast(values, torch.bool) if ctx.torch_dtype(x) == torch.bool else values


@lowers(aten.sort)
def sort(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", -1)
    descending = node.args[2] if len(node.args) > 2 else node.kwargs.get("descending", False)
    axis = dim % ctx.rank(x)
    value = _orderable(ctx, x)
    k = ctx.op.Shape(value, start=axis, end=axis + 1)
    values, indices = ctx.op.TopK(
        value, k, axis=axis, largest=int(descending), sorted=1, _outputs=2
    )
    return _as_input(ctx, x, values), indices


@lowers(aten.argsort)
def argsort(ctx: LoweringContext, node: torch.fx.Node):
    """Indices that sort ``x`` along ``dim``: ``TopK`` over the whole axis (ONNX breaks ties by
    the lower index, so the order is stable)."""
    arguments = _arguments(node)
    x = node.args[0]
    axis = arguments.get("dim", -1) % max(ctx.rank(x), 1)
    value = _orderable(ctx, x)
    k = ctx.op.Shape(value, start=axis, end=axis + 1)
    descending = int(bool(arguments.get("descending", False)))
    _, indices = ctx.op.TopK(value, k, axis=axis, largest=descending, sorted=1, _outputs=2)
    return indices


@lowers(aten.bucketize)
def bucketize(ctx: LoweringContext, node: torch.fx.Node):
    """The bucket of each value among sorted ``boundaries``: how many boundaries lie below it
    (``right``: at or below it), counted by comparing every value with every boundary."""
    arguments = _arguments(node)
    x, boundaries = ctx.value(node.args[0]), ctx.value(arguments["boundaries"])
    op = ctx.op
    below = op.LessOrEqual if arguments.get("right", False) else op.Less
    # [..., 1] against [n]: [..., n]
    compared = below(boundaries, op.Unsqueeze(x, ctx.ints([-1])))
    count = op.ReduceSum(op.Cast(compared, to=7), ctx.ints([-1]), keepdims=0)  # INT64
    return op.Cast(count, to=6) if arguments.get("out_int32", False) else count  # INT32


def _arguments(node: torch.fx.Node) -> dict:
    """The node's arguments by schema name (positional and keyword alike)."""
    names = [a.name for a in node.target._schema.arguments]
    return {**dict(zip(names, node.args, strict=False)), **node.kwargs}


def _var(ctx: LoweringContext, node: torch.fx.Node):
    arguments = _arguments(node)
    x = node.args[0]
    dims = arguments.get("dim")
    correction = arguments.get("correction")
    if correction is None:  # the older overloads say unbiased (default True) instead
        correction = 1 if arguments.get("unbiased", True) else 0
    keepdim = arguments.get("keepdim", False)
    dtype = ctx.torch_dtype(x)
    value = ctx.value(x)
    axes = _axes(ctx, x, dims)
    axes_v = ctx.ints(axes) if axes is not None else None
    mean_keep = (
        ctx.op.ReduceMean(value, axes_v, keepdims=1)
        if axes_v is not None
        else ctx.op.ReduceMean(value, keepdims=1)
    )
    centered = ctx.op.Sub(value, mean_keep)
    squares = ctx.op.Mul(centered, centered)
    total = (
        ctx.op.ReduceSum(squares, axes_v, keepdims=int(keepdim))
        if axes_v is not None
        else ctx.op.ReduceSum(squares, keepdims=int(keepdim))
    )
    shape = ctx.op.Shape(value)
    count_axes = axes if axes is not None else list(range(ctx.rank(x)))
    count = ctx.op.ReduceProd(ctx.op.Gather(shape, ctx.ints(count_axes)), keepdims=0)
    denom = ctx.op.Sub(ctx.cast(count, dtype), ctx.constant(float(correction), dtype))
    var = ctx.op.Div(total, denom)
    mean_out = (
        mean_keep
        if keepdim
        else (
            ctx.op.Squeeze(mean_keep, axes_v)
            if axes_v is not None
            else ctx.op.Reshape(mean_keep, ctx.ints([]))
        )
    )
    return var, mean_out


@lowers(aten.var)
def var(ctx: LoweringContext, node: torch.fx.Node):
    return _var(ctx, node)[0]


@lowers(aten.var_mean)
def var_mean(ctx: LoweringContext, node: torch.fx.Node):
    return _var(ctx, node)


@lowers(aten.std)
def std(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Sqrt(_var(ctx, node)[0])


@lowers(aten.linalg_vector_norm, aten.norm)
def vector_norm(ctx: LoweringContext, node: torch.fx.Node):
    order = node.args[1] if len(node.args) > 1 else node.kwargs.get("ord", 2)
    dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim")
    keepdim = node.args[3] if len(node.args) > 3 else node.kwargs.get("keepdim", False)
    if order not in (2, 2.0, 1, 1.0):
        raise NotImplementedError(f"vector norm of order {order}")
    onnx_op = "ReduceL2" if order in (2, 2.0) else "ReduceL1"
    return _reduce(onnx_op, ctx, node, dims, keepdim, ctx.out_dtype(node))


def _matrix_norm(node: torch.fx.Node) -> str | None:
    """Why ``linalg_norm`` is left to torch's decomposition: a matrix norm other than
    Frobenius (over two axes, or over a 2-D input without ``dim``), or an order the vector
    norm does not lower."""
    args = list(node.args[1:]) + [None] * 2
    order = node.kwargs.get("ord", args[0])
    dims = node.kwargs.get("dim", args[1])
    rank = node.args[0].meta["val"].dim()
    axes = ([dims] if isinstance(dims, int) else list(dims)) if dims is not None else None
    if order is None or order == "fro" and (axes is None and rank == 2 or len(axes or []) == 2):
        return None
    if axes is not None and len(axes) == 1 or axes is None and rank == 1:
        return None if order in (1, 2, 1.0, 2.0) else f"vector norm of order {order}"
    return f"matrix norm of order {order}"


@lowers(aten.linalg_norm, declines=_matrix_norm)
def linalg_norm(ctx: LoweringContext, node: torch.fx.Node):
    """``torch.linalg.norm``: the vector norm over ``dim`` (all axes when None; Frobenius is
    the 2-norm over both axes)."""
    args = list(node.args[1:]) + [None] * 3
    order = node.kwargs.get("ord", args[0])
    dims = node.kwargs.get("dim", args[1])
    keepdim = node.kwargs.get("keepdim", args[2] or False)
    onnx_op = "ReduceL1" if order in (1, 1.0) else "ReduceL2"
    dims = [dims] if isinstance(dims, int) else dims
    return _reduce(onnx_op, ctx, node, dims, keepdim, ctx.out_dtype(node))


@lowers(aten._safe_softmax)
def safe_softmax(ctx: LoweringContext, node: torch.fx.Node):
    from lowering.nn import safe_softmax as guarded

    x, dim = node.args[0], node.args[1]
    dtype = ctx.out_dtype(node)
    if dim % max(ctx.rank(x), 1) != ctx.rank(x) - 1:
        raise NotImplementedError("_safe_softmax over a non-last axis")
    return guarded(ctx, ctx.value(x, dtype), dtype)
