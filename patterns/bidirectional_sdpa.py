"""torch's ``scaled_dot_product_attention`` with no mask and no causality, in a graph without a
padding mask (diffusers' attention processors, self and cross), as the fused ``Attention``.

diffusers' processors call sdpa themselves (no transformers AttentionInterface to capture), on
``[batch, heads, tokens, head_dim]`` queries and keys that may be of other lengths (cross
attention over the text). When the call has no mask, no ``is_causal``, no dropout, and the graph
has no ``attention_mask`` input that could mean padding, attention over every key is what the
``Attention`` op computes with no mask. Anything else is left to ``sdpa.py`` or the lowering.
"""

from __future__ import annotations

import math

import torch
import torch.fx

from patterns.attention import AttentionCall, attend
from patterns.base import Claim, Decline, MatchContext, aten, is_op, module_of

NAME = "bidirectional_sdpa"


def match(node: torch.fx.Node, context: MatchContext) -> Claim | Decline | None:
    if not is_op(node, aten.scaled_dot_product_attention) or context.causal:
        return None
    if context.padding_mask is not None:
        return None  # a model with padding: its masks are the transformers patterns' business
    module = module_of(node)[0]
    args = list(node.args) + [None] * 7
    q, k, v, mask = args[0], args[1], args[2], args[3]
    dropout = node.kwargs.get("dropout_p", args[4] or 0.0)
    is_causal = bool(node.kwargs.get("is_causal", args[5] or False))
    scale = node.kwargs.get("scale", args[6])
    if mask is not None:
        return Decline(NAME, module, "the call has a mask (a bias or padding it would carry)")
    if is_causal:
        return Decline(NAME, module, "causal attention without a padding input")
    if dropout:
        return Decline(NAME, module, "attention dropout is on")
    qv, kv, vv = (t.meta.get("val") for t in (q, k, v))
    if any(t is None or t.dim() != 4 for t in (qv, kv, vv)) or qv.shape[1] % kv.shape[1]:
        return Decline(NAME, module, "q/k/v are not [batch, heads, tokens, head_dim]")
    if qv.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return Decline(NAME, module, f"attention in {qv.dtype}")
    scaling = float(scale) if scale is not None else 1.0 / math.sqrt(qv.shape[-1])
    call = AttentionCall(
        -1, scaling, 0, 0.0, qv.dtype, int(kv.shape[1]), int(kv.shape[-1]), int(vv.shape[-1]),
        int(qv.shape[1]), causal=False,
    )  # fmt: skip

    def emit(ctx):
        query = ctx.value(q)
        length = ctx.op.Shape(query, start=2, end=3)
        return attend(ctx, call, query, ctx.value(k), ctx.value(v), length)

    attributes = {
        "layer": None, "heads": call.q_heads, "kv_heads": call.kv_heads,
        "head_dim": call.head_dim, "v_head_dim": call.v_head_dim, "scaling": scaling,
        "causal": False, "cross": not _same_length(qv, kv),
    }  # fmt: skip
    return Claim(NAME, "Attention", module, {node}, node, emit, attributes)


def _same_length(q: torch.Tensor, k: torch.Tensor) -> bool:
    a, b = q.shape[2], k.shape[2]
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return a.node.expr == b.node.expr
    return a == b
