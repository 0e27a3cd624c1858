"""Attention a model computes with torch's scaled_dot_product_attention itself (falcon, ...).

Models that do not call transformers' AttentionInterface still reach one
``aten.scaled_dot_product_attention`` node per layer. When that node is plain causal attention
over the model's padding mask, it is emitted as the same ``Attention`` component (with the KV
cache) as captured attention. The mask argument is not reused: it is checked to be a boolean
allow/deny mask built from the inputs alone (so it cannot carry an ALiBi or other bias), and the
config (and its text sub-config) to have no sliding window or chunking, and then rebuilt from ``attention_mask`` like
everywhere else. The mask must also compare query and key positions somewhere (a causal mask
does; a bidirectional padding mask does not), and read ``attention_mask`` (a mask built without
it ignores padding, which the rebuilt one would apply: BLT's entropy patcher). The layer index
comes from the module path.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.fx

from mobius.sources.config import read
from patterns.attention import AttentionCall, attend
from patterns.base import Claim, Decline, MatchContext, aten, is_op

_WINDOW_FIELDS = ("sliding_window", "attention_chunk_size")
# decline reasons that say the attention is bidirectional (an encoder): no KV cache can reproduce it
NOT_CAUSAL = "the attention is not causal"
NOT_CAUSAL_MASK = "the mask is not causal (it never compares query and key positions)"
BIDIRECTIONAL = frozenset({NOT_CAUSAL, NOT_CAUSAL_MASK})
IGNORES_PADDING = "the mask ignores attention_mask (no padding), which the rebuilt mask applies"


def _layer_index(path: str) -> int | None:
    found = re.search(r"\.(\d+)(?:\.|$)", path)
    return int(found.group(1)) if found else None


def _inputs_only(mask: torch.fx.Node) -> bool:
    """The mask depends on graph inputs only (no parameter, buffer or constant)."""
    seen, todo = set(), [mask]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "placeholder":
            if not node.name.startswith(("input_ids", "attention_mask", "position_ids", "args_")):
                return False
            continue
        todo.extend(n for n in node.all_input_nodes)
    return True


def _has_window(config: Any) -> bool:
    """The config, or its text sub-config (where a composite model keeps the decoder's window, as
    Gemma-3's does), sets a sliding window or chunked attention."""
    configs = [config]
    if hasattr(config, "get_text_config"):
        configs.append(config.get_text_config())
    values = (read(c, f) for c in configs for f in _WINDOW_FIELDS)  # per layer: a tuple
    return any(any(v) if isinstance(v, tuple) else v for v in values)


def _reads(mask: torch.fx.Node, placeholder: str) -> bool:
    """The mask is computed from the graph input named ``placeholder``."""
    return any(n.op == "placeholder" and n.name == placeholder for n in _ancestors(mask))


def _mask_reason(
    mask: Any, is_causal: bool, config: Any, padding_mask: str | None = None
) -> str | None:
    if _has_window(config):
        return "the config has a sliding window or chunked attention the mask may encode"
    if mask is None:
        return None if is_causal else NOT_CAUSAL
    val = mask.meta.get("val")
    if val is None or val.dtype != torch.bool:
        return "the mask is additive (it may carry a positional bias such as ALiBi)"
    if not _inputs_only(mask):
        return "the mask depends on weights or constants, not only on the inputs"
    if not _compares_positions(mask):
        return NOT_CAUSAL_MASK
    if padding_mask is not None and not _reads(mask, padding_mask):
        return IGNORES_PADDING
    return None


def _ancestors(node: torch.fx.Node) -> set[torch.fx.Node]:
    seen, todo = set(), [node]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(current.all_input_nodes)
    return seen


def _compares_positions(mask: torch.fx.Node) -> bool:
    """A causal mask compares two position ranges (``kv_idx <= q_idx``); a padding mask does not."""
    for node in _ancestors(mask):
        if not is_op(node, aten.le, aten.lt, aten.ge, aten.gt):
            continue
        sides = [a for a in node.args[:2] if isinstance(a, torch.fx.Node)]
        if len(sides) == 2 and all(
            any(is_op(n, aten.arange) for n in _ancestors(side)) for side in sides
        ):
            return True
    return False


def match(node: torch.fx.Node, context: MatchContext) -> Claim | Decline | None:
    if not is_op(node, aten.scaled_dot_product_attention):
        return None
    from patterns.rotary import _module

    module = _module(node)
    args = list(node.args) + [None] * 7
    q, k, v, mask = args[0], args[1], args[2], args[3]
    dropout = node.kwargs.get("dropout_p", args[4] or 0.0)
    is_causal = bool(node.kwargs.get("is_causal", args[5] or False))
    scale = node.kwargs.get("scale", args[6])
    if not context.causal:
        return Decline(
            "sdpa", module, "only causal-LM attention is matched; this task's attention is lowered"
        )
    layer = _layer_index(module)
    if layer is None:
        return Decline("sdpa", module, "no layer index in the module path to name the cache")
    if dropout:
        return Decline("sdpa", module, "attention dropout is on")
    reason = _mask_reason(mask, is_causal, context.hf_config, context.padding_mask)
    if reason:
        return Decline("sdpa", module, reason)
    qv, kv = q.meta["val"], k.meta["val"]
    if qv.dim() != 4 or qv.shape[1] % kv.shape[1]:
        return Decline("sdpa", module, "q/k are not [batch, heads, seq, dim] with grouped heads")
    scaling = float(scale) if scale is not None else 1.0 / math.sqrt(qv.shape[-1])

    def emit(ctx):
        vv = v.meta["val"]
        call = AttentionCall(
            layer,
            scaling,
            0,
            0.0,
            qv.dtype,
            int(kv.shape[1]),
            int(kv.shape[-1]),
            int(vv.shape[-1]),
            int(qv.shape[1]),
        )
        query = ctx.value(q)
        return attend(
            ctx, call, query, ctx.value(k), ctx.value(v), ctx.op.Shape(query, start=2, end=3)
        )

    attributes = {
        "layer": layer, "heads": int(qv.shape[1]), "kv_heads": int(kv.shape[1]), "head_dim": int(qv.shape[-1]),
        "v_head_dim": int(v.meta["val"].shape[-1]), "scaling": scaling, "causal": True,
    }  # fmt: skip
    return Claim("sdpa", "Attention", module, {node}, node, emit, attributes)
