"""Attention of encoder–decoder graphs, captured through transformers' AttentionInterface.

The seq2seq graphs (``mobius/tasks/seq2seq.py``) build the HF model with the implementation
``mobius_seq2seq``. Like ``mobius`` (``patterns/attention.py``) it has no mask function, so
transformers builds no model-level mask, and every call becomes one ``mobius::seq2seq_attention``
node; the emitter rebuilds the mask from the graph's inputs. Which mask a call takes follows from
the graph being traced and the keys' length, not from the model's family:

- encoder graph: bidirectional, the encoder's padding (``attention_mask``), none for audio;
- decoder graph, keys as long as the cross cache (``past_key_values.{i}.encoder.*``): cross
  attention, bidirectional over the encoder's padding (``encoder_attention_mask``);
- decoder graph, other keys (the self cache grown by the new tokens, concatenated in the trace by
  transformers' ``DynamicCache``): causal, the new tokens being the last of the keys.

An additive ``position_bias`` (T5's relative buckets, computed by the traced model from the cache
length) is an input of the op and is added to the mask. Calls the op cannot express (a mask the
module built itself, a sliding window, ALiBi, sinks, a call outside a seq2seq graph) decline:
they run transformers' sdpa path, record ``_mobius_declined`` on the module, and
``mobius/synth/graphs.py`` traces that graph again with transformers' own attention.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from lowering import LoweringContext, onnx_dtype
from mobius.components.cross_attention import BiasedAttention, Seq2SeqMask
from mobius.tasks.seq2seq_phase import current_phase
from patterns.attention import reference_attention
from patterns.registry import emits

IMPLEMENTATION = "mobius_seq2seq"
_UNSUPPORTED_KWARGS = ("s_aux", "sinks", "attention_chunk_size", "head_mask", "alibi")


def _same(a: int | torch.SymInt, b: int | torch.SymInt | None) -> bool:
    """Equal as traced, without adding a guard."""
    if b is None:
        return False
    exprs = [x.node.expr if isinstance(x, torch.SymInt) else x for x in (a, b)]
    return bool(exprs[0] == exprs[1])


@torch.library.custom_op("mobius::seq2seq_attention", mutates_args=())
def seq2seq_attention_op(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None,
    scaling: float,
    is_causal: bool,
    padded: bool,
    softcap: float,
) -> torch.Tensor:
    """Reference semantics (no padding): [b, h, s, d] inputs -> [b, s, h, dv] output."""
    return reference_attention(query, key, value, scaling, softcap, is_causal, bias=bias)


OP = torch.ops.mobius.seq2seq_attention.default


@seq2seq_attention_op.register_fake
def _shape(query, key, value, bias, scaling, is_causal, padded, softcap):
    batch, heads, seq, _ = query.shape
    return query.new_empty((batch, seq, heads, value.shape[-1]))


def _declared_causal(module: torch.nn.Module, is_causal: bool | None) -> bool | None:
    return is_causal if is_causal is not None else getattr(module, "is_causal", None)


def decline_reason(
    module: torch.nn.Module,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    is_causal: bool | None,
    kwargs: dict[str, Any],
) -> tuple[str | None, bool]:
    """(why the call cannot be captured, or None; whether it is causal)."""
    current = current_phase()
    if current is None:
        return "the call is outside an encoder-decoder graph's trace", False
    for name in _UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None:
            return f"the call passes {name}, which the Attention component does not model", False
    if kwargs.get("sliding_window"):
        return "a sliding window is not modelled", False
    if kwargs.get("softcap") and kwargs.get("position_bias") is not None:
        return "a softcap with a position bias is not modelled", False
    if attention_mask is not None:
        # no mask function is registered, so a mask that arrives was made by the module itself
        return "the module passes its own attention mask or bias, which the op cannot carry", False
    declared = _declared_causal(module, is_causal)
    length = key.shape[2]
    if current.graph == "placeholder":
        return None, bool(declared)  # dead code: only its cross keys/values are kept
    if current.graph == "encoder":
        if declared:
            return "the encoder's attention is causal", False
        lengths = current.padded_lengths
        if lengths is not None and not any(_same(length, n) for n in lengths):
            return (
                "the keys are not positions of the padded input, so its mask does not apply",
                False,
            )
        return None, False
    cross = any(_same(length, n) for n in current.cross_lengths)
    if declared is not None and bool(declared) == cross:
        kind = "cross" if cross else "self"
        return f"the module's causality ({declared}) does not fit {kind}-attention", False
    return None, not cross


def mobius_seq2seq_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The function registered in transformers' AttentionInterface as ``mobius_seq2seq``."""
    reason, causal = decline_reason(module, key, attention_mask, is_causal, kwargs)
    if reason is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        module._mobius_declined = reason
        for name in ("softcap", "position_bias"):
            kwargs.pop(name, None)
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    current = current_phase()
    bias = kwargs.get("position_bias")
    out = torch.ops.mobius.seq2seq_attention(
        query,
        key,
        value,
        None if bias is None else bias.to(query.dtype),
        float(scaling if scaling is not None else query.shape[-1] ** -0.5),
        causal,
        not causal and current.padded_lengths is not None,
        float(kwargs.get("softcap") or 0.0),
    )
    return out, None


def install() -> None:
    """Register ``mobius_seq2seq`` with transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(IMPLEMENTATION, mobius_seq2seq_attention_forward)


# ops that hand on their input's values (or cast them): a zeros tensor stays one through them
_SAME_VALUES = {
    torch.ops.aten.detach,
    torch.ops.aten.detach_,  # T5's bias, left in the graph (it changes no value)
    torch.ops.aten.alias,
    torch.ops.aten.clone,
    torch.ops.aten.contiguous,
    torch.ops.aten.to,
    torch.ops.aten._to_copy,
}


def is_zeros(node: object) -> bool:
    """A bias that is a literal zeros tensor (T5's layers without relative attention bias)."""
    while isinstance(node, torch.fx.Node) and _packet(node) in _SAME_VALUES:
        node = node.args[0]
    return isinstance(node, torch.fx.Node) and node.target in (
        torch.ops.aten.zeros.default,
        torch.ops.aten.new_zeros.default,
    )


def _packet(node: torch.fx.Node) -> object:
    return getattr(node.target, "overloadpacket", None)


@emits(torch.ops.mobius.seq2seq_attention.default)
def emit_seq2seq_attention(ctx: LoweringContext, node: torch.fx.Node):
    """[batch, heads, seq, dim] in, [batch, seq, heads, dim] out (as traced)."""
    q, k, v, bias, scaling, causal, padded, softcap = node.args
    query, key, value = (ctx.value(a) for a in (q, k, v))
    dtype = ctx.val(q).dtype
    masks = ctx.state.setdefault("masks", {})
    kind = ("seq2seq", causal, padded)
    if kind not in masks:
        padding = ctx.state.get("attention_mask") if padded else None
        masks[kind] = Seq2SeqMask(causal, name="causal_mask" if causal else "padding_mask")(
            ctx.op,
            padding,
            ctx.op.Shape(query, start=2, end=3),
            ctx.op.Shape(key, start=2, end=3),
            onnx_dtype(dtype),
            float(torch.finfo(dtype).min),
        )
    extra = None if bias is None or is_zeros(bias) else ctx.value(bias)
    component = BiasedAttention(scaling, softcap, name="attention")
    y = component(ctx.op, query, key, value, masks[kind], extra)
    return ctx.op.Transpose(y, perm=[0, 2, 1, 3])
