"""Neural-network ops with a direct ONNX counterpart: normalisation, embedding, attention."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.dtypes import onnx_dtype
from lowering.registry import lowers

aten = torch.ops.aten


def _ones(ctx: LoweringContext, shape: list[int], dtype: torch.dtype):
    return ctx.op.Constant(value=ir.tensor(np.ones(shape, dtype=onnx_dtype(dtype).numpy())))


@lowers(aten.layer_norm)
def layer_norm(ctx: LoweringContext, node: torch.fx.Node):
    args = list(node.args) + [None] * 5
    x, normalized_shape, weight, bias, eps = args[0], args[1], args[2], args[3], args[4]
    eps = 1e-5 if eps is None else eps
    dtype = ctx.torch_dtype(x)
    scale = ctx.value(weight) if weight is not None else _ones(ctx, list(normalized_shape), dtype)
    inputs = [ctx.value(x), scale] + ([ctx.value(bias)] if bias is not None else [])
    return ctx.op.LayerNormalization(*inputs, axis=-len(normalized_shape), epsilon=float(eps))


@lowers(aten.native_layer_norm)
def native_layer_norm(ctx: LoweringContext, node: torch.fx.Node):
    x, normalized_shape, weight, bias, eps = node.args
    dtype = ctx.torch_dtype(x)
    scale = ctx.value(weight) if weight is not None else _ones(ctx, list(normalized_shape), dtype)
    inputs = [ctx.value(x), scale] + ([ctx.value(bias)] if bias is not None else [])
    return ctx.op.LayerNormalization(
        *inputs, axis=-len(normalized_shape), epsilon=float(eps), _outputs=3
    )


@lowers(aten.rms_norm)
def rms_norm(ctx: LoweringContext, node: torch.fx.Node):
    args = list(node.args) + [None] * 4
    x, normalized_shape, weight, eps = args[0], args[1], args[2], args[3]
    dtype = ctx.torch_dtype(x)
    eps = torch.finfo(dtype).eps if eps is None else eps
    scale = ctx.value(weight) if weight is not None else _ones(ctx, list(normalized_shape), dtype)
    return ctx.op.RMSNormalization(
        ctx.value(x), scale, axis=-len(normalized_shape), epsilon=float(eps)
    )


@lowers(aten.group_norm)
def group_norm(ctx: LoweringContext, node: torch.fx.Node):
    args = list(node.args) + [None] * 5
    x, groups, weight, bias, eps = args[0], args[1], args[2], args[3], args[4] or 1e-5
    value = ctx.value(x)
    dtype = ctx.torch_dtype(x)
    shape = ctx.op.Shape(value)
    grouped = ctx.op.Reshape(value, ctx.ints([0, groups, -1]))
    mean = ctx.op.ReduceMean(grouped, ctx.ints([2]), keepdims=1)
    centered = ctx.op.Sub(grouped, mean)
    variance = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), ctx.ints([2]), keepdims=1)
    normed = ctx.op.Div(
        centered, ctx.op.Sqrt(ctx.op.Add(variance, ctx.constant(float(eps), dtype)))
    )
    out = ctx.op.Reshape(normed, shape)
    trailing = [1] * (ctx.rank(x) - 2)
    if weight is not None:
        out = ctx.op.Mul(out, ctx.op.Reshape(ctx.value(weight), ctx.ints([-1] + trailing)))
    if bias is not None:
        out = ctx.op.Add(out, ctx.op.Reshape(ctx.value(bias), ctx.ints([-1] + trailing)))
    return out


@lowers(aten._weight_norm)
def weight_norm(ctx: LoweringContext, node: torch.fx.Node):
    """``v * g / ||v||``, the L2 norm over every axis but ``dim`` (-1: over all of them), as
    ``torch.nn.utils.parametrizations.weight_norm`` computes the weight (wav2vec2's conv positions)."""
    v, g = node.args[0], node.args[1]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    rank = ctx.rank(v)
    axes = [a for a in range(rank) if dim == -1 or a != dim % rank]
    norm = ctx.op.ReduceL2(ctx.value(v), ctx.ints(axes), keepdims=1)
    return ctx.op.Mul(ctx.value(v), ctx.op.Div(ctx.value(g), norm))


def _batch_norm(ctx: LoweringContext, x, weight, bias, mean, var, eps: float):
    """``BatchNormalization`` on running statistics; missing affine terms are ones and zeros."""
    dtype = ctx.torch_dtype(x)
    channels = [int(ctx.val(mean).shape[0])]
    zeros = ir.tensor(np.zeros(channels, dtype=onnx_dtype(dtype).numpy()))
    scale = ctx.value(weight) if weight is not None else _ones(ctx, channels, dtype)
    shift = ctx.value(bias) if bias is not None else ctx.op.Constant(value=zeros)
    return ctx.op.BatchNormalization(
        ctx.value(x), scale, shift, ctx.value(mean), ctx.value(var), epsilon=float(eps)
    )


@lowers(aten.batch_norm)
def batch_norm(ctx: LoweringContext, node: torch.fx.Node):
    """Eval-mode batch norm (``training`` False: the running statistics)."""
    x, weight, bias, mean, var, training, _momentum, eps = node.args[:8]
    if training or mean is None:
        return _batch_statistics_norm(ctx, x, weight, bias, eps)
    return _batch_norm(ctx, x, weight, bias, mean, var, eps)


def _batch_statistics_norm(ctx: LoweringContext, x, weight, bias, eps: float):
    """Training-mode batch norm: normalised by the mean and biased variance over every axis but
    the channels (axis 1). BiT's weight-standardised convolutions call it so on their weights;
    the running statistics it would update are no output of an inference graph."""
    rank = ctx.rank(x)
    axes = ctx.ints([a for a in range(rank) if a != 1])
    value = ctx.value(x)
    centred = ctx.op.Sub(value, ctx.op.ReduceMean(value, axes, keepdims=1))
    var = ctx.op.ReduceMean(ctx.op.Mul(centred, centred), axes, keepdims=1)
    dtype = ctx.torch_dtype(x)
    out = ctx.op.Div(centred, ctx.op.Sqrt(ctx.op.Add(var, ctx.constant(float(eps), dtype))))
    per_channel = ctx.ints([-1] + [1] * (rank - 2))
    if weight is not None:
        out = ctx.op.Mul(out, ctx.op.Reshape(ctx.value(weight), per_channel))
    if bias is not None:
        out = ctx.op.Add(out, ctx.op.Reshape(ctx.value(bias), per_channel))
    return out


@lowers(aten._native_batch_norm_legit_no_training)
def batch_norm_inference(ctx: LoweringContext, node: torch.fx.Node):
    """What export records for eval-mode batch norm; the saved mean and inverse std that
    training would return are empty, as PyTorch returns them here."""
    x, weight, bias, mean, var = node.args[:5]
    eps = node.args[6] if len(node.args) > 6 else node.kwargs.get("eps", 1e-5)
    out = _batch_norm(ctx, x, weight, bias, mean, var, eps)
    dtype = onnx_dtype(ctx.torch_dtype(x)).numpy()
    empty = ctx.op.Constant(value=ir.tensor(np.zeros([0], dtype=dtype)))
    return out, empty, empty


@lowers(aten.embedding)
def embedding(ctx: LoweringContext, node: torch.fx.Node):
    weight, indices = node.args[0], node.args[1]
    return ctx.op.Gather(ctx.value(weight), ctx.value(indices), axis=0)


@lowers(aten.scaled_dot_product_attention)
def scaled_dot_product_attention(ctx: LoweringContext, node: torch.fx.Node):
    """sdpa as an explicit softmax(QK^T * scale + mask) V, matching torch on fully masked rows."""
    args = list(node.args) + [None] * 7
    q, k, v, mask = args[0], args[1], args[2], args[3]
    is_causal = node.kwargs.get("is_causal", args[5] or False)
    scale = node.kwargs.get("scale", args[6])
    enable_gqa = node.kwargs.get("enable_gqa", args[7] or False)
    dtype = ctx.torch_dtype(q)
    q_val, k_val = ctx.val(q), ctx.val(k)
    head_dim = q_val.shape[-1]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    key, value = ctx.value(k), ctx.value(v)
    if enable_gqa and q_val.dim() == 4 and q_val.shape[1] != k_val.shape[1]:
        groups = q_val.shape[1] // k_val.shape[1]
        key, value = (_repeat_heads(ctx, t, groups) for t in (key, value))
    scores = ctx.op.MatMul(ctx.value(q), ctx.op.Transpose(key, perm=_swap_last(q_val.dim())))
    scores = ctx.op.Mul(scores, ctx.constant(float(scale), dtype))
    if is_causal:
        q_len = ctx.op.Shape(ctx.value(q), start=-2, end=-1)
        k_len = ctx.op.Shape(key, start=-2, end=-1)
        ones = ctx.op.Expand(ctx.constant(True, torch.bool), ctx.op.Concat(q_len, k_len, axis=0))
        allowed = ctx.op.Cast(
            ctx.op.Trilu(ctx.op.Cast(ones, to=ir.DataType.INT64), upper=0), to=ir.DataType.BOOL
        )
        scores = ctx.op.Where(allowed, scores, ctx.constant(float("-inf"), dtype))
    if mask is not None:
        if ctx.torch_dtype(mask) == torch.bool:
            scores = ctx.op.Where(ctx.value(mask), scores, ctx.constant(float("-inf"), dtype))
        else:
            scores = ctx.op.Add(scores, ctx.value(mask, dtype))
    return ctx.op.MatMul(safe_softmax(ctx, scores, dtype), value)


def safe_softmax(ctx: LoweringContext, scores, dtype: torch.dtype):
    """Softmax on the last axis whose fully masked rows are 0, not NaN (as torch's sdpa does)."""
    probs = ctx.op.Softmax(scores, axis=-1)
    return ctx.op.Where(ctx.op.IsNaN(probs), ctx.constant(0.0, dtype), probs)


def _swap_last(rank: int) -> list[int]:
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


def _repeat_heads(ctx: LoweringContext, x, groups: int):
    """[b, kv, s, d] -> [b, kv * groups, s, d], each kv head repeated ``groups`` times in place."""
    expanded = ctx.op.Unsqueeze(x, ctx.ints([2]))
    shape = ctx.op.Shape(x)
    target = ctx.op.Concat(
        ctx.op.Slice(shape, ctx.ints([0]), ctx.ints([2])),
        ctx.ints([groups]),
        ctx.op.Slice(shape, ctx.ints([2]), ctx.ints([4])),
        axis=0,
    )
    tiled = ctx.op.Expand(expanded, target)
    return ctx.op.Reshape(
        tiled,
        ctx.op.Concat(ctx.ints([0, -1]), ctx.op.Slice(shape, ctx.ints([2]), ctx.ints([4])), axis=0),
    )


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@lowers(aten.pad, aten.constant_pad_nd)
def pad(ctx: LoweringContext, node: torch.fx.Node):
    names = [a.name for a in node.target._schema.arguments]
    arguments = {**dict(zip(names, node.args, strict=False)), **node.kwargs}
    x, pads = node.args[0], list(arguments["pad"])
    mode = _PAD_MODES[arguments.get("mode", "constant")]
    fill = arguments.get("value")
    rank = ctx.rank(x)
    begins = [0] * rank
    ends = [0] * rank
    for i in range(len(pads) // 2):  # torch lists pads from the last dimension backwards
        begins[rank - 1 - i] = pads[2 * i]
        ends[rank - 1 - i] = pads[2 * i + 1]
    dtype = ctx.torch_dtype(x)
    return ctx.op.Pad(
        ctx.value(x), ctx.ints(begins + ends), ctx.constant(fill or 0, dtype), mode=mode
    )
