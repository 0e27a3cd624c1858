"""Ops that move data without computing on it: views, reshapes, slices, concatenation, splits."""

from __future__ import annotations

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.linalg import transposable, transposed_initializer
from lowering.registry import lowers
from lowering.transposed import DerivedTensor

aten = torch.ops.aten
INT64_MAX = 2**63 - 1


def _norm_dim(ctx: LoweringContext, node_arg, dim: int) -> int:
    rank = ctx.rank(node_arg)
    return dim + rank if dim < 0 else dim


@lowers(aten.view, aten.reshape, aten._unsafe_view)
def reshape(ctx: LoweringContext, node: torch.fx.Node):
    shape = node.args[1]
    # ONNX reads a 0 in the shape as "keep this input dimension" unless allowzero is set; torch
    # means a size of 0, which a symbolic size can be at run time (a slice of one token short of
    # a one-token sequence). allowzero may not meet a -1, which torch infers as ONNX does.
    exact = all(not (isinstance(d, int) and d == -1) for d in shape)
    attributes = {"allowzero": 1} if exact else {}
    return ctx.op.Reshape(ctx.value(node.args[0]), ctx.ints(shape), **attributes)


@lowers(aten.view_as, aten.reshape_as)
def reshape_as(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Reshape(ctx.value(node.args[0]), ctx.op.Shape(ctx.value(node.args[1])))


@lowers(
    aten.contiguous,
    aten.clone,
    aten.alias,
    aten.detach,
    aten.lift_fresh_copy,
    aten.dropout,
    aten.feature_dropout,
)
def identity(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.value(node.args[0])


def _transposed(ctx: LoweringContext, x: torch.fx.Node, perm: list[int]):
    """``Transpose(x, perm)``; for a 2-D weight read by this transpose alone (Falcon's and
    Bloom's ``x @ self.weight.T``), the transposed initializer instead: a ``Transpose`` of an
    initializer is folded by onnxruntime at every load, a second copy of the weight in memory."""
    value = ctx.value(x)
    derived = isinstance(value.const_value, DerivedTensor)  # Q of a QR: computed when written
    if perm == [1, 0] and len(x.users) == 1 and not derived and transposable(value):
        return transposed_initializer(ctx, value)
    return ctx.op.Transpose(value, perm=perm)


@lowers(aten.transpose)
def transpose(ctx: LoweringContext, node: torch.fx.Node):
    x, a, b = node.args
    rank = ctx.rank(x)
    perm = list(range(rank))
    a, b = a % rank if rank else 0, b % rank if rank else 0
    perm[a], perm[b] = perm[b], perm[a]
    return _transposed(ctx, x, perm)


@lowers(aten.t, aten.numpy_T)
def t(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    if ctx.rank(x) < 2:
        return ctx.value(x)
    return _transposed(ctx, x, list(reversed(range(ctx.rank(x)))))


@lowers(aten.permute)
def permute(ctx: LoweringContext, node: torch.fx.Node):
    x, dims = node.args
    rank = ctx.rank(x)
    return _transposed(ctx, x, [d % rank for d in dims])


@lowers(aten.unsqueeze)
def unsqueeze(ctx: LoweringContext, node: torch.fx.Node):
    x, dim = node.args
    rank = ctx.rank(x) + 1
    return ctx.op.Unsqueeze(ctx.value(x), ctx.ints([dim % rank]))


@lowers(aten.squeeze)
def squeeze(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    dims = node.args[1] if len(node.args) > 1 else None
    val = ctx.val(x)
    if dims is None:
        dims = [i for i, s in enumerate(val.shape) if isinstance(s, int) and s == 1]
    elif isinstance(dims, int):
        dims = [dims]
    rank = val.dim()
    dims = [d % rank for d in dims if val.shape[d % rank] == 1] if rank else []
    if not dims:
        return ctx.value(x)
    return ctx.op.Squeeze(ctx.value(x), ctx.ints(dims))


@lowers(aten.expand, aten.broadcast_to)
def expand(ctx: LoweringContext, node: torch.fx.Node):
    x, sizes = node.args[0], node.args[1]
    # ONNX Expand broadcasts, so a kept dimension (-1 in torch) is expressed as 1.
    sizes = [1 if isinstance(s, int) and s == -1 else s for s in sizes]
    return ctx.op.Expand(ctx.value(x), ctx.ints(sizes))


@lowers(aten.expand_as)
def expand_as(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.Expand(ctx.value(node.args[0]), ctx.op.Shape(ctx.value(node.args[1])))


@lowers(aten.slice)
def slice_(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else 0
    start = node.args[2] if len(node.args) > 2 else None
    end = node.args[3] if len(node.args) > 3 else None
    step = node.args[4] if len(node.args) > 4 else 1
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    if start == 0 and end == INT64_MAX and step == 1:
        return ctx.value(x)
    dim = _norm_dim(ctx, x, dim)
    return ctx.op.Slice(
        ctx.value(x), ctx.ints([start]), ctx.ints([end]), ctx.ints([dim]), ctx.ints([step])
    )


@lowers(aten.narrow)
def narrow(ctx: LoweringContext, node: torch.fx.Node):
    x, dim, start, length = node.args
    dim = _norm_dim(ctx, x, dim)
    start_v = ctx.scalar_int(start)
    end_v = ctx.op.Add(start_v, ctx.scalar_int(length))
    one = ctx.ints([1])
    return ctx.op.Slice(
        ctx.value(x), ctx.op.Reshape(start_v, one), ctx.op.Reshape(end_v, one), ctx.ints([dim])
    )


@lowers(aten.select)
def select(ctx: LoweringContext, node: torch.fx.Node):
    x, dim, index = node.args
    return ctx.op.Gather(ctx.value(x), ctx.scalar_int(index), axis=_norm_dim(ctx, x, dim))


@lowers(aten.cat, aten.concat, aten.concatenate)
def cat(ctx: LoweringContext, node: torch.fx.Node):
    tensors = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    dtype = ctx.out_dtype(node)
    # torch lets 1-D empty tensors take part in cat with any rank; ONNX does not.
    kept = [t for t in tensors if not (ctx.rank(t) == 1 and ctx.val(t).shape[0] == 0)] or list(
        tensors[:1]
    )
    rank = ctx.rank(kept[0])
    values = [ctx.value(t, dtype) for t in kept]
    if len(values) == 1:
        return values[0]
    return ctx.op.Concat(*values, axis=dim % rank if rank else 0)


@lowers(aten.stack)
def stack(ctx: LoweringContext, node: torch.fx.Node):
    tensors = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else 0
    dtype = ctx.out_dtype(node)
    rank = ctx.rank(tensors[0]) + 1
    axis = ctx.ints([dim % rank])
    return ctx.op.Concat(
        *[ctx.op.Unsqueeze(ctx.value(t, dtype), axis) for t in tensors], axis=dim % rank
    )


def _split(ctx: LoweringContext, node: torch.fx.Node, sizes, count: int, dim: int):
    outputs = ctx.op.Split(ctx.value(node.args[0]), sizes, axis=dim, _outputs=count)
    return tuple(outputs) if count > 1 else (outputs,)


def _output_sizes(ctx: LoweringContext, node: torch.fx.Node, dim: int):
    """The split sizes: given ones (ints or SymInt nodes), else the traced output sizes."""
    sizes = node.args[1]
    if isinstance(sizes, (list, tuple)) and node.target.overloadpacket is not aten.tensor_split:
        return ctx.ints(sizes)
    sizes = [v.shape[dim] for v in ctx.val(node)]
    if not all(isinstance(s, int) for s in sizes):  # export specialises these; guard all the same
        raise NotImplementedError("split of a dynamic axis into traced part sizes")
    return ctx.ints(sizes)


@lowers(aten.split, aten.split_with_sizes, aten.chunk, aten.tensor_split)
def split(ctx: LoweringContext, node: torch.fx.Node):
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    dim = _norm_dim(ctx, node.args[0], dim)
    count = len(ctx.val(node))
    if count == 1:  # one part: the whole input, whatever its (dynamic) size
        return (ctx.op.Identity(ctx.value(node.args[0])),)
    if node.target is aten.tensor_split.indices:  # parts between the indices (traced or not)
        bounds = [0, *node.args[1], INT64_MAX]
        x, axis = ctx.value(node.args[0]), ctx.ints([dim])
        return tuple(
            ctx.op.Slice(x, ctx.ints([start]), ctx.ints([end]), axis)
            for start, end in zip(bounds, bounds[1:], strict=False)
        )
    if node.target.overloadpacket is aten.chunk and _dynamic_parts(ctx, node, dim):
        if count != node.args[1]:
            raise NotImplementedError("chunk of a dynamic axis into fewer parts than asked")
        # ONNX's equal split has torch.chunk's sizes: ceil(size / n) each, the last one smaller
        outputs = ctx.op.Split(ctx.value(node.args[0]), axis=dim, num_outputs=count, _outputs=count)
        return tuple(outputs) if count > 1 else (outputs,)
    return _split(ctx, node, _output_sizes(ctx, node, dim), count, dim)


def _dynamic_parts(ctx: LoweringContext, node: torch.fx.Node, dim: int) -> bool:
    return not all(isinstance(v.shape[dim], int) for v in ctx.val(node))


@lowers(aten.unbind)
def unbind(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    dim = _norm_dim(ctx, x, node.args[1] if len(node.args) > 1 else 0)
    count = len(ctx.val(node))
    parts = _split(ctx, node, ctx.ints([1] * count), count, dim)
    axis = ctx.ints([dim])
    return tuple(ctx.op.Squeeze(p, axis) for p in parts)


@lowers(aten.flatten)
def flatten(ctx: LoweringContext, node: torch.fx.Node):
    x = node.args[0]
    rank = ctx.rank(x)
    start = (node.args[1] if len(node.args) > 1 else 0) % max(rank, 1)
    end = (node.args[2] if len(node.args) > 2 else -1) % max(rank, 1)
    if rank == 0:
        return ctx.op.Reshape(ctx.value(x), ctx.ints([1]))
    shape = ctx.op.Shape(ctx.value(x))
    parts = []
    if start > 0:
        parts.append(ctx.op.Slice(shape, ctx.ints([0]), ctx.ints([start])))
    parts.append(ctx.ints([-1]))
    if end < rank - 1:
        parts.append(ctx.op.Slice(shape, ctx.ints([end + 1]), ctx.ints([rank])))
    target = parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)
    return ctx.op.Reshape(ctx.value(x), target)


@lowers(aten.unflatten)
def unflatten(ctx: LoweringContext, node: torch.fx.Node):
    x, dim, sizes = node.args
    dim, rank = _norm_dim(ctx, x, dim), ctx.rank(x)
    value = ctx.value(x)
    parts = [ctx.op.Shape(value, end=dim)] if dim > 0 else []
    parts.append(ctx.ints(sizes))
    if dim + 1 < rank:
        parts.append(ctx.op.Shape(value, start=dim + 1))
    # a size of 0 is a size of 0, as in ``reshape`` (AnyFlow FAR's empty compressed timesteps)
    exact = all(not (isinstance(d, int) and d == -1) for d in sizes)
    target = parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)
    return ctx.op.Reshape(value, target, **({"allowzero": 1} if exact else {}))


@lowers(aten.repeat)
def repeat(ctx: LoweringContext, node: torch.fx.Node):
    x, repeats = node.args
    rank = ctx.rank(x)
    value = ctx.value(x)
    if len(repeats) > rank:  # torch prepends size-1 dimensions
        value = ctx.op.Reshape(
            value, ctx.op.Concat(ctx.ints([1] * (len(repeats) - rank)), ctx.op.Shape(value), axis=0)
        )
    return ctx.op.Tile(value, ctx.ints(repeats))


@lowers(aten.flip)
def flip(ctx: LoweringContext, node: torch.fx.Node):
    x, dims = node.args
    rank = ctx.rank(x)
    dims = [d % rank for d in dims]
    n = len(dims)
    return ctx.op.Slice(
        ctx.value(x),
        ctx.ints([-1] * n),
        ctx.ints([-(2**63)] * n),
        ctx.ints(dims),
        ctx.ints([-1] * n),
    )


@lowers(aten.roll)
def roll(ctx: LoweringContext, node: torch.fx.Node):
    x, shifts = node.args[0], node.args[1]
    dims = node.args[2] if len(node.args) > 2 else []
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    value = ctx.value(x)
    if not dims:
        flat = ctx.op.Reshape(value, ctx.ints([-1]))
        rolled = _roll_axis(ctx, flat, shifts[0], 0)
        return ctx.op.Reshape(rolled, ctx.op.Shape(value))
    for shift, dim in zip(shifts, dims, strict=True):
        value = _roll_axis(ctx, value, shift, _norm_dim(ctx, x, dim))
    return value


def _roll_axis(ctx: LoweringContext, value, shift: int, axis: int):
    size = ctx.op.Shape(value, start=axis, end=axis + 1)
    cut = ctx.op.Mod(ctx.op.Sub(size, ctx.ints([shift])), size)  # (size - shift) mod size
    tail = ctx.op.Slice(value, cut, ctx.ints([INT64_MAX]), ctx.ints([axis]))
    head = ctx.op.Slice(value, ctx.ints([0]), cut, ctx.ints([axis]))
    return ctx.op.Concat(tail, head, axis=axis)


@lowers(aten.repeat_interleave)
def repeat_interleave(ctx: LoweringContext, node: torch.fx.Node):
    """x.repeat_interleave(r, dim) with an integer r (or a symbolic size): each slice along dim
    repeated r times in place."""
    x, repeats = node.args[0], node.args[1]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim")
    if isinstance(ctx.val(repeats), torch.Tensor):
        raise NotImplementedError("repeat_interleave with a tensor of repeats")
    value = ctx.value(x)
    if dim is None:
        value, dim = ctx.op.Reshape(value, ctx.ints([-1])), 0
    rank = max(ctx.rank(x), 1) if node.args[2:] or node.kwargs.get("dim") is not None else 1
    dim = dim % rank
    shape = ctx.op.Shape(value)
    expanded = ctx.op.Unsqueeze(value, ctx.ints([dim + 1]))
    target = ctx.op.Concat(
        ctx.op.Slice(shape, ctx.ints([0]), ctx.ints([dim + 1])),
        ctx.ints([repeats]),
        ctx.op.Slice(shape, ctx.ints([dim + 1]), ctx.ints([INT64_MAX])),
        axis=0,
    )
    merged = ctx.op.Concat(
        ctx.op.Slice(shape, ctx.ints([0]), ctx.ints([dim])),
        ctx.ints([-1]),
        ctx.op.Slice(shape, ctx.ints([dim + 1]), ctx.ints([INT64_MAX])),
        axis=0,
    )
    return ctx.op.Reshape(ctx.op.Expand(expanded, target), merged)
