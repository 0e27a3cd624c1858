"""``aten.group_norm`` as one component: ``InstanceNormalization`` over the channels reshaped into
groups, then torch's per-channel scale and bias.

Two exact ONNX forms exist: ``GroupNormalization``-21 (scale and bias per channel) and
``Reshape [N, groups, -1]`` -> ``InstanceNormalization`` (unit scale, zero bias per group) ->
``Reshape`` back -> ``Mul``/``Add`` by the per-channel weight and bias. onnxruntime 1.32's CPU
kernel for the first is 1.5-3x slower than the second at a UNet's shapes
(``benchmarks/diffusers_group_norm.py``) and its CUDA provider has no kernel for it, so the
second is emitted; explain still reports the module as one ``GroupNormalization``. A missing
weight or bias is left out. Only float32 inputs are claimed (the dtype checked against
onnxruntime); others stay lowered op by op (``lowering/nn.py``).
"""

from __future__ import annotations

import torch
import torch.fx

from patterns.base import Claim, Decline, MatchContext, aten, is_op, module_of


def match(node: torch.fx.Node, context: MatchContext | None = None) -> Claim | Decline | None:
    if not is_op(node, aten.group_norm):
        return None
    args = list(node.args) + [None] * 5
    x, groups, weight, bias = args[0], args[1], args[2], args[3]
    eps = float(node.kwargs.get("eps", args[4] if args[4] is not None else 1e-5))
    module = module_of(node)[0]
    val = x.meta.get("val")
    if val is None or val.dtype != torch.float32:
        return Decline("group_norm", module, "only float32 group norms are claimed (checked)")
    if val.dim() < 2:
        return Decline("group_norm", module, "a group norm needs a channel axis (rank >= 2)")
    channels, rank, groups = int(val.shape[1]), val.dim(), int(groups)

    def emit(ctx):
        value = ctx.value(x)
        grouped = ctx.op.Reshape(value, ctx.ints([0, groups, -1]))
        ones, zeros = ctx.constant(torch.ones(groups)), ctx.constant(torch.zeros(groups))
        normed = ctx.op.InstanceNormalization(grouped, ones, zeros, epsilon=eps)
        out = ctx.op.Reshape(normed, ctx.op.Shape(value))
        per_channel = ctx.ints([channels] + [1] * (rank - 2))
        if weight is not None:
            out = ctx.op.Mul(out, ctx.op.Reshape(ctx.value(weight), per_channel))
        if bias is not None:
            out = ctx.op.Add(out, ctx.op.Reshape(ctx.value(bias), per_channel))
        return out

    attributes = {"num_groups": groups, "channels": channels, "epsilon": eps}
    return Claim("group_norm", "GroupNormalization", module, {node}, node, emit, attributes)
