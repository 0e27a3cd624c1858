"""Indexing by tensors: advanced indexing, gather, index_select, scatter, tril/triu."""

from __future__ import annotations

import onnx_ir as ir
import torch
import torch.fx

from lowering.context import INT64, LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.index)
def index(ctx: LoweringContext, node: torch.fx.Node):
    """x[i0, i1, ...] with index tensors on consecutive dimensions (None elsewhere)."""
    x, indices = node.args[0], list(node.args[1])
    positions = [i for i, idx in enumerate(indices) if idx is not None]
    if not positions:
        return ctx.value(x)
    if positions != list(range(positions[0], positions[-1] + 1)):
        raise NotImplementedError("advanced indexing on non-adjacent dimensions")
    if any(ctx.torch_dtype(indices[i]) == torch.bool for i in positions):
        if len(positions) != 1:
            raise NotImplementedError("boolean mask indexing combined with other indices")
        mask = indices[positions[0]]
        # a boolean mask over dimensions first..first+mask_rank selects the true positions
        flat_idx = ctx.op.NonZero(ctx.value(mask))  # [mask_rank, n]
        first = positions[0]
        value = _move_front(ctx, ctx.value(x), first, ctx.rank(x), count=ctx.rank(mask))
        gathered = ctx.op.GatherND(value, ctx.op.Transpose(flat_idx, perm=[1, 0]))
        return _move_back(ctx, gathered, first, ctx.rank(x) - ctx.rank(mask) + 1)
    first = positions[0]
    rank = ctx.rank(x)
    value = ctx.value(x)
    if len(positions) == 1:
        return ctx.op.Gather(value, ctx.value(indices[first], torch.int64), axis=first)
    idx_vals = [ctx.value(indices[i], torch.int64) for i in positions]
    stacked, _ = _stacked_indices(ctx, idx_vals)
    moved = _move_front(ctx, value, first, rank, count=len(positions))
    gathered = ctx.op.GatherND(moved, stacked)
    index_rank = max(ctx.rank(indices[i]) for i in positions)
    return _move_back(ctx, gathered, first, rank - len(positions) + index_rank, count=index_rank)


def _stacked_indices(ctx: LoweringContext, idx_vals: list) -> tuple:
    """The index tensors broadcast together and stacked on a new last axis (GatherND/ScatterND
    indices), and their broadcast shape."""
    broadcast = idx_vals[0]
    for v in idx_vals[1:]:
        broadcast = ctx.op.Add(broadcast, v)
    shape = ctx.op.Shape(broadcast)
    last = ctx.ints([-1])
    stacked = ctx.op.Concat(
        *[ctx.op.Unsqueeze(ctx.op.Expand(v, shape), last) for v in idx_vals], axis=-1
    )
    return stacked, shape


def _move_front(ctx: LoweringContext, value, first: int, rank: int, count: int = 1):
    """Move dimensions first..first+count to the front."""
    if first == 0:
        return value
    perm = list(range(first, first + count)) + list(range(first)) + list(range(first + count, rank))
    return ctx.op.Transpose(value, perm=perm)


def _move_back(ctx: LoweringContext, value, first: int, rank: int, count: int = 1):
    """Inverse of _move_front for a result whose leading ``count`` dims belong at ``first``."""
    if first == 0:
        return value
    perm = list(range(count, count + first)) + list(range(count)) + list(range(count + first, rank))
    return ctx.op.Transpose(value, perm=perm)


@lowers(aten.index_select)
def index_select(ctx: LoweringContext, node: torch.fx.Node):
    x, dim, idx = node.args
    return ctx.op.Gather(ctx.value(x), ctx.value(idx, torch.int64), axis=dim % max(ctx.rank(x), 1))


@lowers(aten.gather)
def gather(ctx: LoweringContext, node: torch.fx.Node):
    x, dim, idx = node.args[:3]
    return ctx.op.GatherElements(
        ctx.value(x), ctx.value(idx, torch.int64), axis=dim % max(ctx.rank(x), 1)
    )


@lowers(aten.scatter)
def scatter(ctx: LoweringContext, node: torch.fx.Node):
    x, dim, idx, src = node.args[:4]
    dtype = ctx.out_dtype(node)
    updates = ctx.value(src, dtype)
    if not isinstance(src, torch.fx.Node):
        updates = ctx.op.Expand(updates, ctx.op.Shape(ctx.value(idx)))
    reduce = node.kwargs.get("reduce")
    attrs = {"reduction": {"add": "add", "multiply": "mul"}[reduce]} if reduce else {}
    return ctx.op.ScatterElements(
        ctx.value(x), ctx.value(idx, torch.int64), updates, axis=dim % ctx.rank(x), **attrs
    )


@lowers(aten.scatter_add)
def scatter_add(ctx: LoweringContext, node: torch.fx.Node):
    x, dim, idx, src = node.args[:4]
    return ctx.op.ScatterElements(
        ctx.value(x),
        ctx.value(idx, torch.int64),
        ctx.value(src),
        axis=dim % ctx.rank(x),
        reduction="add",
    )


def _index_scatter(ctx: LoweringContext, node: torch.fx.Node, updates, reduction: str | None):
    """``x``'s slices ``index[k]`` along ``dim`` set to (or, with ``add``, increased by)
    ``source``'s slice k: the 1-D index spread over the source's shape for ScatterElements."""
    x, dim, index, source = node.args[:4]
    dim %= max(ctx.rank(x), 1)
    along = [1] * max(ctx.rank(source), 1)
    along[dim] = -1
    spread = ctx.op.Expand(
        ctx.op.Reshape(ctx.value(index, torch.int64), ctx.ints(along)), ctx.op.Shape(updates)
    )
    attrs = {"reduction": reduction} if reduction else {}
    x = ctx.value(x, ctx.out_dtype(node))
    return ctx.op.ScatterElements(x, spread, updates, axis=dim, **attrs)


@lowers(aten.index_add)
def index_add(ctx: LoweringContext, node: torch.fx.Node):
    """``x.index_add(dim, index, source, alpha=...)`` (repeated indices add up, as in torch)."""
    alpha = node.kwargs.get("alpha", node.args[4] if len(node.args) > 4 else 1)
    dtype = ctx.out_dtype(node)
    updates = ctx.value(node.args[3], dtype)
    if alpha != 1:
        updates = ctx.op.Mul(updates, ctx.constant(alpha, dtype))
    return _index_scatter(ctx, node, updates, "add")


@lowers(aten.index_copy)
def index_copy(ctx: LoweringContext, node: torch.fx.Node):
    return _index_scatter(ctx, node, ctx.value(node.args[3], ctx.out_dtype(node)), None)


@lowers(aten.one_hot)
def one_hot(ctx: LoweringContext, node: torch.fx.Node):
    """int64 one-hot rows on a new last axis (torch.export refuses ``num_classes=-1``: the
    largest index sets a size)."""
    x = node.args[0]
    classes = node.kwargs.get("num_classes", node.args[1] if len(node.args) > 1 else -1)
    depth = (
        ctx.value(classes, torch.int64)
        if isinstance(classes, torch.fx.Node)
        else ctx.constant(classes, torch.int64)
    )
    values = ctx.constant([0, 1], torch.int64)
    return ctx.op.OneHot(ctx.value(x, torch.int64), depth, values, axis=-1)


_SCATTER_REDUCTIONS = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


@lowers(aten.scatter_reduce)
def scatter_reduce(ctx: LoweringContext, node: torch.fx.Node):
    """``x.scatter_reduce(dim, index, src, reduce, include_self=...)``.

    ONNX's ScatterElements reduces into the existing values, which is ``include_self=True``.
    Without self, each position some index names starts from the reduction's identity instead
    (0, 1, the lowest or the highest value); positions no index names keep ``x``. ``mean`` is a
    sum divided by the count of values that went into it.
    """
    x, dim, idx, src, reduce = node.args[:5]
    include_self = node.kwargs.get("include_self", node.args[5] if len(node.args) > 5 else True)
    dtype = ctx.out_dtype(node)
    if reduce == "mean" and not dtype.is_floating_point:
        raise NotImplementedError("scatter_reduce mean on integers (torch floors the division)")
    axis = dim % max(ctx.rank(x), 1)
    value, index, updates = ctx.value(x), ctx.value(idx, torch.int64), ctx.value(src, dtype)
    if include_self and reduce != "mean":
        reduction = _SCATTER_REDUCTIONS[reduce]
        return ctx.op.ScatterElements(value, index, updates, axis=axis, reduction=reduction)
    # how many values of src land on each position of x (float: ORT adds floats everywhere)
    ones = ctx.op.Expand(ctx.constant(1.0), ctx.op.Shape(index))
    zeros = ctx.op.Expand(ctx.constant(0.0), ctx.op.Shape(value))
    count = ctx.op.ScatterElements(zeros, index, ones, axis=axis, reduction="add")
    hit = ctx.op.Greater(count, ctx.constant(0.0))
    if reduce == "mean":
        start = value if include_self else ctx.op.Where(hit, ctx.constant(0.0, dtype), value)
        total = ctx.op.ScatterElements(start, index, updates, axis=axis, reduction="add")
        denominator = ctx.cast(count, dtype)
        if include_self:
            denominator = ctx.op.Add(denominator, ctx.constant(1.0, dtype))
        safe = ctx.op.Where(hit, denominator, ctx.constant(1.0, dtype))
        return ctx.op.Where(hit, ctx.op.Div(total, safe), value)
    identity = {
        "sum": 0,
        "prod": 1,
        "amax": _lowest(dtype),
        "amin": _highest(dtype),
    }[reduce]
    start = ctx.op.Where(hit, ctx.constant(identity, dtype), value)
    reduction = _SCATTER_REDUCTIONS[reduce]
    return ctx.op.ScatterElements(start, index, updates, axis=axis, reduction=reduction)


def _lowest(dtype: torch.dtype) -> float | int:
    if dtype == torch.bool:
        return False
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def _highest(dtype: torch.dtype) -> float | int:
    if dtype == torch.bool:
        return True
    return float("inf") if dtype.is_floating_point else torch.iinfo(dtype).max


def _tri(upper: int):
    def lower(ctx: LoweringContext, node: torch.fx.Node):
        x = node.args[0]
        diagonal = node.args[1] if len(node.args) > 1 else node.kwargs.get("diagonal", 0)
        value = ctx.value(x)
        is_bool = ctx.torch_dtype(x) == torch.bool
        if is_bool:  # ORT's Trilu has no bool kernel
            value = ctx.cast(value, torch.int64)
        out = ctx.op.Trilu(value, ctx.scalar_int(diagonal), upper=upper)
        return ctx.cast(out, torch.bool) if is_bool else out

    return lower


lowers(aten.tril)(_tri(0))
lowers(aten.triu)(_tri(1))


@lowers(aten.slice_scatter)
def slice_scatter(ctx: LoweringContext, node: torch.fx.Node):
    """x with x[start:end:step] along ``dim`` replaced by ``src``, via scattered indices."""
    args = list(node.args) + [None] * 6
    x, src, dim, start, end, step = args[0], args[1], args[2] or 0, args[3], args[4], args[5] or 1
    rank = ctx.rank(x)
    dim = dim % rank
    value = ctx.value(x)
    size = ctx.op.Shape(value, start=dim, end=dim + 1)
    start_v = ctx.ints([0 if start is None else start])
    end_v = size if end is None or (isinstance(end, int) and end >= 2**62) else ctx.ints([end])
    indices = ctx.op.Slice(
        ctx.op.Range(
            ctx.op.Squeeze(ctx.ints([0])), ctx.op.Squeeze(size), ctx.op.Squeeze(ctx.ints([1]))
        ),
        start_v,
        end_v,
        ctx.ints([0]),
        ctx.ints([step]),
    )  # the positions along dim that src covers
    shape = [1] * rank
    shape[dim] = -1
    src_v = ctx.value(src, ctx.torch_dtype(x))
    full_indices = ctx.op.Expand(ctx.op.Reshape(indices, ctx.ints(shape)), ctx.op.Shape(src_v))
    return ctx.op.ScatterElements(value, full_indices, src_v, axis=dim)


@lowers(aten.select_scatter)
def select_scatter(ctx: LoweringContext, node: torch.fx.Node):
    x, src, dim, index = node.args
    rank = ctx.rank(x)
    dim = dim % rank
    value = ctx.value(x)
    src_v = ctx.op.Unsqueeze(ctx.value(src, ctx.torch_dtype(x)), ctx.ints([dim]))
    size = ctx.op.Shape(value, start=dim, end=dim + 1)
    idx = ctx.op.Mod(
        ctx.op.Add(
            ctx.ints([index])
            if isinstance(index, int)
            else ctx.op.Reshape(ctx.value(index), ctx.ints([1])),
            size,
        ),
        size,
    )
    shape = [1] * rank
    shape[dim] = 1
    full_indices = ctx.op.Expand(ctx.op.Reshape(idx, ctx.ints(shape)), ctx.op.Shape(src_v))
    return ctx.op.ScatterElements(value, full_indices, src_v, axis=dim)


@lowers(aten.copy)
def copy(ctx: LoweringContext, node: torch.fx.Node):
    """Functional copy_: the result is ``src`` cast and broadcast to ``self``'s dtype and shape."""
    dst, src = node.args[0], node.args[1]
    return ctx.op.Expand(ctx.value(src, ctx.torch_dtype(dst)), ctx.op.Shape(ctx.value(dst)))


@lowers(aten.index_put, aten._unsafe_index_put)
def index_put(ctx: LoweringContext, node: torch.fx.Node):
    """x[i0, i1, ...] = v (or += v with accumulate), index tensors on consecutive dims, via ScatterND."""
    x, indices, values = node.args[0], list(node.args[1]), node.args[2]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    dtype, rank = ctx.out_dtype(node), ctx.rank(x)
    positions = [i for i, idx in enumerate(indices) if idx is not None]
    if positions != list(range(positions[0], positions[-1] + 1)):
        raise NotImplementedError("index_put on non-adjacent dimensions")
    first, value = positions[0], ctx.value(x)
    idx_vals: list = []
    for i in positions:
        if ctx.torch_dtype(indices[i]) == torch.bool:  # a mask: one index row per masked dim
            if len(positions) != 1:
                raise NotImplementedError("boolean mask index_put combined with other indices")
            rows = ctx.op.NonZero(ctx.value(indices[i]))  # [mask_rank, n]
            count = ctx.rank(indices[i])
            parts = ctx.op.Split(rows, axis=0, num_outputs=count, _outputs=count)
            parts = parts if count > 1 else [parts]
            idx_vals += [ctx.op.Squeeze(p, ctx.ints([0])) for p in parts]
            index_rank = 1
        else:
            idx_vals.append(ctx.value(indices[i], torch.int64))
            index_rank = max(ctx.rank(indices[j]) for j in positions)
    count = len(idx_vals)
    # negative indices count from the end of their dimension
    dims = ctx.op.Shape(value)
    idx_vals = [
        ctx.op.Mod(v, ctx.op.Gather(dims, ctx.ints([first + k]), axis=0))
        for k, v in enumerate(idx_vals)
    ]
    stacked, index_shape = _stacked_indices(ctx, idx_vals)
    # the updates, broadcast to x.shape[:first] + index shape + x.shape[first + count:]
    update_shape = ctx.op.Concat(
        ctx.op.Shape(value, start=0, end=first) if first else ctx.ints([]),
        index_shape,
        ctx.op.Shape(value, start=first + count),
        axis=0,
    )
    updates = ctx.op.Expand(ctx.value(values, dtype), update_shape)
    updates = _move_front(
        ctx, updates, first, first + index_rank + rank - first - count, index_rank
    )
    moved = _move_front(ctx, value, first, rank, count=count)
    scattered = ctx.op.ScatterND(moved, stacked, updates, reduction="add" if accumulate else "none")
    return _move_back(ctx, scattered, first, rank, count=count)


@lowers(aten.masked_scatter)
def masked_scatter(ctx: LoweringContext, node: torch.fx.Node):
    """``x.masked_scatter(mask, source)``: the positions where ``mask`` (broadcast to ``x``) is
    true take ``source``'s elements in order, the others keep ``x``'s (Florence-2 scatters its
    image features into the prompt's image tokens). The k-th true position reads ``source``'s
    k-th element: its index is the running count of true positions, less one. ``source`` gets
    one trailing zero, so that a mask with no true position reads nothing out of range."""
    x, mask, source = node.args[:3]
    op = ctx.op
    dtype = ctx.out_dtype(node)
    values = ctx.value(x, dtype)
    shape = op.Shape(values)
    flat = ctx.ints([-1])
    picked = op.Reshape(op.Expand(ctx.value(mask, torch.bool), shape), flat)
    position = op.Sub(
        op.CumSum(op.Cast(picked, to=INT64), op.Constant(value=ir.tensor(0, dtype=INT64))),
        ctx.ints([1]),
    )
    padded = op.Concat(op.Reshape(ctx.value(source, dtype), flat), ctx.constant([0], dtype), axis=0)
    taken = op.Gather(padded, op.Max(position, ctx.ints([0])), axis=0)
    return op.Reshape(op.Where(picked, taken, op.Reshape(values, flat)), shape)
