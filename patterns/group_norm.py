"""``aten.group_norm`` as ONNX ``GroupNormalization`` (opset 21: scale and bias per channel).

GroupNormalization-21 computes torch's group norm exactly: statistics over each group of
channels and the spatial axes, then a per-channel scale and bias. (Opset 18's version took them
per group, which torch's does not have; opset 21 changed that.) A missing weight or bias becomes
ones or zeros. Only float32 inputs are claimed (the dtype checked against onnxruntime); others,
and inputs of rank 2, stay lowered op by op (``lowering/nn.py``).
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
    if val.dim() < 3:
        return Decline("group_norm", module, "GroupNormalization needs spatial axes (rank >= 3)")
    channels = int(val.shape[1])

    def emit(ctx):
        scale = ctx.value(weight) if weight is not None else ctx.constant(torch.ones(channels))
        shift = ctx.value(bias) if bias is not None else ctx.constant(torch.zeros(channels))
        return ctx.op.GroupNormalization(
            ctx.value(x), scale, shift, num_groups=int(groups), epsilon=eps
        )

    attributes = {"num_groups": int(groups), "channels": channels, "epsilon": eps}
    return Claim("group_norm", "GroupNormalization", module, {node}, node, emit, attributes)
