"""Attention, captured through transformers' AttentionInterface rather than matched structurally.

While tracing, every module that calls ``ALL_ATTENTION_FUNCTIONS[...]`` reaches our function, which
records the call as one ``mobius::attention`` node carrying the layer index, scaling, causality,
sliding window and softcap. Because "mobius" has no entry in transformers' mask interface, the
model-level mask construction is skipped entirely; the mask is rebuilt from the task's
``attention_mask`` input. The node is then emitted as the ``Attention`` component with the
``past_key_values.{i}`` / ``present.{i}`` cache of the causal-LM contract. In a task without a
cache (``single_graph_task``: encoders), bidirectional calls are captured too and get a padding-only
mask (none where the task has no padding input).

A call the op cannot express exactly (an extra positional bias, attention sinks, a mask the module
built itself) declines: it runs transformers' sdpa path instead, so the layer is lowered op by op, and the
reason is kept on the module as ``_mobius_declined``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
import torch
import torch.fx

from lowering import LoweringContext, onnx_dtype
from mobius.components.attention import Attention, CausalMask, PaddingMask
from mobius.tasks.causal_lm import cache_input_name, cache_output_name
from patterns.registry import emits

IMPLEMENTATION = "mobius"
_UNSUPPORTED_KWARGS = (
    "position_bias",
    "s_aux",
    "sinks",
    "attention_chunk_size",
    "head_mask",
    "alibi",
    "relative_position",
)
# set while tracing a single-graph task (no KV cache): bidirectional calls are captured too
_SINGLE_GRAPH = contextvars.ContextVar("mobius_single_graph", default=False)
# with a padding input: the input lengths its mask may span (None: nothing is padded)
_PADDED_LENGTHS = contextvars.ContextVar("mobius_padded_lengths", default=None)


@contextlib.contextmanager
def single_graph_task(enabled: bool, padded_lengths: tuple | None = None) -> Iterator[None]:
    """While tracing: calls need no layer index for a cache, and ``is_causal=False`` is captured
    (an encoder's padding-only attention) instead of declined. ``padded_lengths`` are the last-axis
    sizes of the task's inputs when one of them is a padding mask: keys of another length (audio
    frames from padded samples) cannot take that mask, so such a call declines."""
    token = _SINGLE_GRAPH.set(enabled)
    lengths = _PADDED_LENGTHS.set(padded_lengths)
    try:
        yield
    finally:
        _SINGLE_GRAPH.reset(token)
        _PADDED_LENGTHS.reset(lengths)


def _same_length(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    """Equal as traced, without adding a guard."""
    exprs = [x.node.expr if isinstance(x, torch.SymInt) else x for x in (a, b)]
    return bool(exprs[0] == exprs[1])


@torch.library.custom_op("mobius::attention", mutates_args=())
def attention_op(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layer_idx: int,
    scaling: float,
    is_causal: bool,
    sliding_window: int,
    softcap: float,
) -> torch.Tensor:
    """Reference semantics (no padding): [b, h, s, d] inputs -> [b, s, h, dv] output."""
    return reference_attention(query, key, value, scaling, softcap, is_causal, sliding_window)


def reference_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scaling: float,
    softcap: float,
    is_causal: bool,
    sliding_window: int = 0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """What the captured attention ops compute, without padding: grouped key/value heads, scaled
    scores, softcap, an additive ``bias``, then the causal (new tokens last) and window masks;
    [b, h, s, d] inputs -> [b, s, h, dv] output."""
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    scores = (query @ key.transpose(-1, -2)).float() * scaling
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias
    q_len, k_len = query.shape[2], key.shape[2]
    q_pos = torch.arange(k_len - q_len, k_len)[:, None]
    k_pos = torch.arange(k_len)[None, :]
    allowed = torch.ones(q_len, k_len, dtype=torch.bool)
    if is_causal:
        allowed &= k_pos <= q_pos
    if sliding_window:
        allowed &= q_pos - k_pos < sliding_window
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    return (probs @ value).transpose(1, 2).contiguous()


@attention_op.register_fake
def _attention_shape(query, key, value, layer_idx, scaling, is_causal, sliding_window, softcap):
    batch, heads, seq, _ = query.shape
    return query.new_empty((batch, seq, heads, value.shape[-1]))


def decline_reason(
    module: torch.nn.Module, kwargs: dict[str, Any], cache: bool = True
) -> str | None:
    """Why this call cannot be one mobius::attention op (None when it can). Without a ``cache``
    (a single-graph task) the layer index names nothing and is not required."""
    for name in _UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None:
            return f"the call passes {name}, which the Attention component does not model"
    if cache and not isinstance(getattr(module, "layer_idx", None), int):
        return "the attention module has no integer layer_idx to name its cache"
    if getattr(getattr(module, "config", None), "attention_chunk_size", None):
        return "chunked attention (attention_chunk_size) is not modelled"
    return None


def mobius_attention_forward(
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
    """The function registered in transformers' AttentionInterface under the name ``mobius``."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    single_graph = _SINGLE_GRAPH.get()
    reason = decline_reason(module, kwargs, cache=not single_graph)
    if reason is None and single_graph and is_causal is None and not hasattr(module, "is_causal"):
        # the model-level mask, which would say, is skipped under "mobius"; transformers' own
        # default (causal) is wrong for encoders that never set the attribute (Splinter)
        reason = "the call does not say whether it is causal (no is_causal argument or attribute)"
    lengths = _PADDED_LENGTHS.get()
    if (
        reason is None
        and single_graph
        and lengths is not None
        and not any(_same_length(key.shape[2], n) for n in lengths)
    ):
        reason = "the keys are not positions of the padded input, so its mask does not apply"
    if reason is None and not causal:
        if not single_graph:
            reason = "bidirectional attention (is_causal=False) has no causal KV cache"
        elif kwargs.get("sliding_window"):
            reason = "a bidirectional sliding window is not modelled"
    if reason is None and attention_mask is not None:
        # "mobius" has no mask function, so the model-level mask is None here: a mask that still
        # arrives was made by the module itself (Doge's dynamic mask: a learned per-key bias), and
        # the op, which rebuilds a plain causal mask, would drop it
        reason = "the module passes its own attention mask or bias, which the op cannot carry"
    if reason is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        module._mobius_declined = reason
        kwargs.pop("softcap", None)
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    layer = getattr(module, "layer_idx", None)
    out = torch.ops.mobius.attention(
        query,
        key,
        value,
        layer if isinstance(layer, int) else -1,
        float(scale),
        bool(causal),
        int(kwargs.get("sliding_window") or 0),
        float(kwargs.get("softcap") or 0.0),
    )
    return out, None


def install() -> None:
    """Register the ``mobius`` attention implementation with transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(IMPLEMENTATION, mobius_attention_forward)


@dataclass(frozen=True)
class AttentionCall:
    """The facts of one captured attention call that the emitted graph needs."""

    layer: int
    scaling: float
    window: int
    softcap: float
    dtype: torch.dtype
    kv_heads: int
    head_dim: int
    v_head_dim: int
    q_heads: int
    causal: bool = True  # False: bidirectional, over the padding mask only (no cache)

    @classmethod
    def of(cls, ctx: LoweringContext, node: torch.fx.Node) -> AttentionCall:
        q, k, v, layer_idx, scaling, is_causal, window, softcap = node.args
        if not is_causal and ctx.state["use_cache"]:
            raise NotImplementedError("non-causal attention in a graph with a KV cache")
        qv, kv, vv = ctx.val(q), ctx.val(k), ctx.val(v)
        return cls(
            layer_idx, scaling, window, softcap, qv.dtype, int(kv.shape[1]), int(kv.shape[-1]),
            int(vv.shape[-1]), int(qv.shape[1]), bool(is_causal),
        )  # fmt: skip


def attend(
    ctx: LoweringContext,
    call: AttentionCall,
    query,
    key,
    value,
    query_length,
    *,
    packed: bool = False,
):
    """Mask (shared per window), Attention component and, with a cache, the past/present I/O.

    ``query``/``key``/``value`` are [batch, heads, seq, dim], or with ``packed`` [batch, seq,
    heads * dim], in which case the output is packed too.
    """
    state = ctx.state
    mask = _mask(ctx, call, query_length)
    heads = (call.q_heads, call.kv_heads) if packed else None
    component = Attention(call.scaling, call.softcap, heads=heads, name="attention")
    if not state["use_cache"]:
        return component(ctx.op, query, key, value, mask)[0]
    past = {
        kind: ir.Value(
            name=cache_input_name(call.layer, kind),
            type=ir.TensorType(onnx_dtype(call.dtype)),
            shape=ir.Shape(["batch", call.kv_heads, "past_sequence_length", dim]),
        )
        for kind, dim in (("key", call.head_dim), ("value", call.v_head_dim))
    }
    y, present_key, present_value = component(
        ctx.op, query, key, value, mask, past["key"], past["value"]
    )
    state["cache"].append((call.layer, past, {"key": present_key, "value": present_value}))
    return y


def _mask(ctx: LoweringContext, call: AttentionCall, query_length) -> ir.Value | None:
    """The additive mask for ``call``, built once per (causality, window) from the padding input.

    Bidirectional calls take the padding mask alone ([batch, 1, 1, keys]), or none where the task
    has no padding input (pixel_values). Masked keys get the dtype's lowest finite value, so a fully
    padded row stays finite."""
    state = ctx.state
    padding = state.get("attention_mask")
    key = (call.causal, call.window)
    if key in state["masks"]:
        return state["masks"][key]
    dtype, lowest = onnx_dtype(call.dtype), float(torch.finfo(call.dtype).min)
    if not call.causal:
        mask = (
            None
            if padding is None
            else PaddingMask(name="padding_mask")(ctx.op, padding, query_length, dtype, lowest)
        )
    else:
        if padding is None:
            raise NotImplementedError("causal attention in a graph without an attention_mask")
        name = f"causal_mask_w{call.window}" if call.window else "causal_mask"
        mask = CausalMask(call.window, name=name)(ctx.op, padding, query_length, dtype, lowest)
    state["masks"][key] = mask
    return mask


@emits(torch.ops.mobius.attention.default)
def emit_attention(ctx: LoweringContext, node: torch.fx.Node):
    """The 4-D form: [batch, heads, seq, dim] in, [batch, seq, heads, dim] out (as traced)."""
    call = AttentionCall.of(ctx, node)
    query, key, value = (ctx.value(a) for a in node.args[:3])
    y = attend(ctx, call, query, key, value, ctx.op.Shape(query, start=2, end=3))
    return ctx.op.Transpose(y, perm=[0, 2, 1, 3])


def cache_outputs(state: dict) -> list[tuple[str, ir.Value]]:
    """(name, value) of every present.{i}.key/value, in layer order."""
    out = []
    for layer, _, present in sorted(state["cache"], key=lambda item: item[0]):
        for kind in ("key", "value"):
            out.append((cache_output_name(layer, kind), present[kind]))
    return out


def cache_inputs(state: dict) -> list[ir.Value]:
    return [
        past[kind]
        for _, past, _ in sorted(state["cache"], key=lambda item: item[0])
        for kind in ("key", "value")
    ]
