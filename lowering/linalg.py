"""Matrix products and convolutions: linear, matmul, addmm, baddbmm, einsum, conv."""

from __future__ import annotations

import onnx_ir as ir
import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers
from lowering.transposed import TransposedTensor

aten = torch.ops.aten


# Weights up to this size are stored transposed (one MatMul per call). A larger one (an untied
# lm_head) is used through Gemm(transB=1) instead: transposing it while saving would hold a second
# full copy of the model's largest tensor in memory.
TRANSPOSE_LIMIT_BYTES = 256 * 1024 * 1024


@lowers(aten.linear)
def linear(ctx: LoweringContext, node: torch.fx.Node):
    """x W^T + b. A weight used only here is stored transposed; a shared (tied) or very large one
    goes through Gemm(transB=1), so it is stored once and never copied."""
    x, weight = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    w = ctx.value(weight)
    if len(weight.users) == 1 and transposable(w):
        y = ctx.op.MatMul(ctx.value(x), transposed_initializer(ctx, w))
    elif ctx.rank(x) >= 2 and ctx.rank(weight) == 2:
        y = _gemm_transposed(ctx, ctx.value(x), w, ctx.rank(x))
    else:
        y = ctx.op.MatMul(ctx.value(x), ctx.op.Transpose(w, perm=[1, 0]))
    return ctx.op.Add(y, ctx.value(bias)) if bias is not None else y


def transposable(w: ir.Value) -> bool:
    """A 2-D initializer with values, small enough to be stored transposed."""
    tensor = w.const_value
    return (
        w.is_initializer()
        and tensor is not None
        and len(tensor.shape) == 2
        and int(tensor.nbytes) <= TRANSPOSE_LIMIT_BYTES
    )


def _gemm_transposed(ctx: LoweringContext, x, w, rank: int):
    """x W^T through Gemm(transB=1), so a weight shared with another op is not copied transposed."""
    if rank == 2:
        return ctx.op.Gemm(x, w, transB=1)
    lead = ctx.op.Shape(x, start=0, end=-1)
    flat = ctx.op.Reshape(x, ctx.op.Concat(ctx.ints([-1]), ctx.op.Shape(x, start=-1), axis=0))
    y = ctx.op.Gemm(flat, w, transB=1)
    return ctx.op.Reshape(y, ctx.op.Concat(lead, ctx.ints([-1]), axis=0))


def transposed_initializer(ctx: LoweringContext, w: ir.Value) -> ir.Value:
    """A new initializer holding W^T, computed only when the model is saved.

    It is named ``<key>.T`` and keeps the source key in ``mobius.source_key`` metadata.
    """
    source = w.const_value
    tensor = TransposedTensor(source, name=f"{w.name}.T")
    value = ir.Value(
        name=f"{w.name}.T",
        type=ir.TensorType(source.dtype),
        shape=tensor.shape,
        const_value=tensor,
    )
    tensor.metadata_props["mobius.source_key"] = source.metadata_props.get(
        "mobius.source_key", w.name or ""
    )
    tensor.metadata_props["mobius.transform"] = "transpose"
    ctx.op.builder.graph.register_initializer(value)
    return value


@lowers(aten.matmul, aten.mm, aten.bmm)
def matmul(ctx: LoweringContext, node: torch.fx.Node):
    return ctx.op.MatMul(ctx.value(node.args[0]), ctx.value(node.args[1]))


def _scaled_sum(ctx: LoweringContext, node: torch.fx.Node, product):
    bias = node.args[0]
    beta = node.kwargs.get("beta", 1)
    alpha = node.kwargs.get("alpha", 1)
    dtype = ctx.out_dtype(node)
    if alpha != 1:
        product = ctx.op.Mul(product, ctx.constant(alpha, dtype))
    if beta == 0:
        return product
    bias_v = ctx.value(bias)
    if beta != 1:
        bias_v = ctx.op.Mul(bias_v, ctx.constant(beta, dtype))
    return ctx.op.Add(bias_v, product)


@lowers(aten.addmm, aten.baddbmm, aten.addbmm)
def addmm(ctx: LoweringContext, node: torch.fx.Node):
    product = ctx.op.MatMul(ctx.value(node.args[1]), ctx.value(node.args[2]))
    if node.target.overloadpacket is aten.addbmm:
        product = ctx.op.ReduceSum(product, ctx.ints([0]), keepdims=0)
    return _scaled_sum(ctx, node, product)


@lowers(aten.einsum)
def einsum(ctx: LoweringContext, node: torch.fx.Node):
    equation, operands = node.args[0], node.args[1]
    dtype = ctx.out_dtype(node)  # torch promotes (float32 positions x float64 frequencies: HiDream)
    return ctx.op.Einsum(*[ctx.value(o, dtype) for o in operands],
                         equation=equation.replace(" ", ""))  # fmt: skip


@lowers(aten.outer)
def outer(ctx: LoweringContext, node: torch.fx.Node):
    a, b = node.args
    dtype = ctx.out_dtype(
        node
    )  # torch promotes (float32 x float64 positions: diffusers' pos_embed)
    return ctx.op.Mul(
        ctx.op.Unsqueeze(ctx.value(a, dtype), ctx.ints([1])),
        ctx.op.Unsqueeze(ctx.value(b, dtype), ctx.ints([0])),
    )


@lowers(aten.conv_transpose1d, aten.conv_transpose2d, aten.conv_transpose3d)
def conv_transpose(ctx: LoweringContext, node: torch.fx.Node):
    """``conv_transpose{1,2,3}d(x, weight, bias, stride, padding, output_padding, groups,
    dilation)``: ConvTranspose, whose weight layout ``[in, out / groups, *kernel]`` is torch's."""
    names = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")
    args = list(node.args) + [node.kwargs.get(n) for n in names[len(node.args) :]]
    x, weight, bias = args[:3]
    spatial = ctx.rank(weight) - 2
    pads = _pairs(args[4] if args[4] is not None else 0, spatial)
    attrs = {
        "strides": _pairs(args[3] if args[3] is not None else 1, spatial),
        "pads": pads + pads,
        "output_padding": _pairs(args[5] if args[5] is not None else 0, spatial),
        "group": int(args[6] if args[6] is not None else 1),
        "dilations": _pairs(args[7] if args[7] is not None else 1, spatial),
    }
    inputs = [ctx.value(x), ctx.value(weight)] + ([ctx.value(bias)] if bias is not None else [])
    return ctx.op.ConvTranspose(*inputs, **attrs)


def _pairs(value, n: int) -> list[int]:
    return list(value) * (n // len(value)) if isinstance(value, (list, tuple)) else [value] * n


@lowers(aten.convolution, aten.conv1d, aten.conv2d, aten.conv3d)
def convolution(ctx: LoweringContext, node: torch.fx.Node):
    args = list(node.args)
    x, weight = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    spatial = ctx.rank(weight) - 2
    stride = _pairs(args[3] if len(args) > 3 else 1, spatial)
    padding = args[4] if len(args) > 4 else 0
    dilation = _pairs(args[5] if len(args) > 5 else 1, spatial)
    transposed = node.target.overloadpacket is aten.convolution and bool(args[6])
    if node.target.overloadpacket is aten.convolution:
        groups = args[8]
    else:
        groups = args[6] if len(args) > 6 else 1
    attrs = {"strides": stride, "dilations": dilation, "group": int(groups)}
    if transposed:  # the same weight layout [in, out / groups, *kernel] in both
        attrs["output_padding"] = _pairs(args[7], spatial)
    if isinstance(padding, str):
        attrs["auto_pad"] = {"same": "SAME_UPPER", "valid": "VALID"}[padding]
    else:
        pads = _pairs(padding, spatial)
        attrs["pads"] = pads + pads
    inputs = [ctx.value(x), ctx.value(weight)] + ([ctx.value(bias)] if bias is not None else [])
    return (ctx.op.ConvTranspose if transposed else ctx.op.Conv)(*inputs, **attrs)
