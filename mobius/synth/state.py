"""A cache carried through the trace: past states are graph inputs, the updated states are outputs.

When mobius cannot capture a model's attention (hand-written attention, positions counted from the
cache, recurrent or convolutional layers), transformers' own ``Cache`` object does the bookkeeping
inside the traced forward: we fill one with the graph's ``past_key_values.{i}.<state>`` inputs,
call the model with it, and return what it holds afterwards as ``present.{i}.<state>``.

Every layer is traced in its continuation form (it has a previous state), so one graph serves the
prefill (states of length 0, or zeros for fixed-size recurrent states) and every decode step.
Sliding-window layers keep the whole history, as a full-attention layer does; the model's mask
applies the window.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from unittest import mock

import torch

from mobius import failures
from mobius.errors import UnsupportedError
from mobius.synth.state_reference import (
    PREFILL_LENGTH,
    fill_prefill_length,
    is_reference_layer,
    read_prefill_length,
    reference_slots,
)
from mobius.tasks.base import BATCH, PAST, TensorSpec, accepted
from mobius.tasks.causal_lm import cache_input_name, cache_output_name

# Cache-layer attributes holding a tensor that grows by one entry per token: the contract's name
# for the state, its batch axis and its token axis.
_GROWING = (
    ("keys", "key", 0, 2),  # [batch, heads, tokens, head_dim]
    ("values", "value", 0, 2),
    ("indexer_keys", "indexer_key", 0, 1),  # DSA's indexer: [batch, tokens, index_dim]
    ("indexer_position_ids", "indexer_position_ids", 1, 2),  # [position_dims, batch, tokens]
)
# StateSlot.index of a state the cache object keeps itself, in a list indexed by layer
ON_CACHE = "on the cache"
# Attributes holding a dict of fixed-size states (batch first), and the contract's name for them.
_RECURRENT = (("conv_states", "conv_state"), ("recurrent_states", "recurrent_state"))


@dataclass(frozen=True)
class StateSlot:
    """One tensor a model carries from one call to the next."""

    layer: int
    kind: str  # key, value, conv_state, recurrent_state (with _{j} when a layer has several)
    attribute: str  # where the mechanism keeps it: keys, values, conv_states, a module attribute
    index: Any  # the mechanism's own address within ``attribute`` (None for growing states)
    shape: tuple[int, ...]  # as probed; the batch and, for growing states, the past length vary
    dtype: torch.dtype
    batch_axis: int = 0
    token_axis: int | None = None  # the axis that grows by one entry per token, if any

    @property
    def grows(self) -> bool:
        """Key/value states grow with every token; conv/recurrent states have a fixed size."""
        return self.token_axis is not None

    def spec(self) -> TensorSpec:
        dims: list[str | int] = list(self.shape)
        dims[self.batch_axis] = BATCH
        if self.token_axis is not None:
            dims[self.token_axis] = PAST
        return TensorSpec(cache_input_name(self.layer, self.kind), self.dtype, tuple(dims))

    @property
    def output_name(self) -> str:
        return cache_output_name(self.layer, self.kind)


class StateMechanism(Protocol):
    """One way a model exposes its state (``state_adapters.py`` has the others)."""

    slots: list[StateSlot]

    def fill(self, model: torch.nn.Module, tensors: Sequence[torch.Tensor]) -> Any:
        """Install ``tensors`` as the past; the object to pass as the model's cache, or None."""

    def read(self, model: torch.nn.Module, returned: Any) -> list[torch.Tensor]:
        """The states after the call (``returned``: the cache the call returned), in slot order."""


@dataclass
class TransformersCache:
    """A transformers ``Cache`` with layers: key/value and conv/recurrent states per layer."""

    slots: list[StateSlot]
    template: Any  # the transformers Cache the probe returned (meta tensors)

    def fill(self, model: torch.nn.Module, tensors: Sequence[torch.Tensor]) -> Any:
        cache = _fresh_cache(self.template)
        layers = _layers_of(cache)
        for name in {s.attribute for s in self.slots if s.index == ON_CACHE}:
            setattr(cache, name, [[] for _ in getattr(self.template, name)])
        for slot, tensor in zip(self.slots, tensors, strict=True):
            if slot.index == ON_CACHE:
                getattr(cache, slot.attribute)[slot.layer] = tensor
                continue
            layer = layers[slot.layer]
            if slot.index == PREFILL_LENGTH:
                fill_prefill_length(layer, tensor)
            elif slot.index is None:
                setattr(layer, slot.attribute, tensor)
                layer.device = tensor.device
            else:  # recurrent layers update these in place: give them their own copy
                getattr(layer, slot.attribute)[slot.index] = tensor.clone()
        _count_tokens_in_graph(layers, self.slots, tensors)
        return cache

    def read(self, model: torch.nn.Module, returned: Any) -> list[torch.Tensor]:
        layers = _layers_of(returned)
        out = []
        for slot in self.slots:
            if slot.index == ON_CACHE:
                out.append(getattr(returned, slot.attribute)[slot.layer])
                continue
            if slot.index == PREFILL_LENGTH:
                out.append(read_prefill_length(layers[slot.layer]))
                continue
            held = getattr(layers[slot.layer], slot.attribute)
            out.append(held if slot.index is None else held[slot.index])
        return out

    @classmethod
    def probe(cls, cache: Any) -> TransformersCache | None:
        layers = _layers_or_none(cache)
        if layers is None:
            return None
        slots: list[StateSlot] = []
        for i, layer in enumerate(layers):
            if is_reference_layer(layer):  # the prompt's keys kept apart: state_reference.py
                slots += reference_slots(i, layer, StateSlot)
                continue
            for attribute, kind, batch_axis, token_axis in _GROWING:
                held = getattr(layer, attribute, None)
                if isinstance(held, torch.Tensor) and held.dim() > token_axis:
                    shape = tuple(held.shape)
                    slots.append(
                        StateSlot(
                            i, kind, attribute, None, shape, held.dtype, batch_axis, token_axis
                        )
                    )
            for attribute, kind in _RECURRENT:
                held = getattr(layer, attribute, None) or {}
                for j, state in sorted(held.items()):
                    if isinstance(state, torch.Tensor):
                        name = kind if len(held) == 1 else f"{kind}_{j}"
                        shape = tuple(state.shape)
                        slots.append(StateSlot(i, name, attribute, j, shape, state.dtype))
        slots += _per_layer_lists(cache)
        return cls(slots, cache) if slots else None


@dataclass
class CacheLayout:
    """Every state a model carries, by the mechanisms that hold it; the first one's object (if
    any) is what the model takes as its cache argument."""

    mechanisms: list[StateMechanism]

    @property
    def slots(self) -> list[StateSlot]:
        return [slot for m in self.mechanisms for slot in m.slots]

    def fill(self, model: torch.nn.Module, tensors: Sequence[torch.Tensor]) -> Any:
        """Install ``tensors`` (in slot order) as the past; the cache object to pass, or None."""
        passed, start = None, 0
        for mechanism in self.mechanisms:
            count = len(mechanism.slots)
            made = mechanism.fill(model, tensors[start : start + count])
            passed = made if passed is None else passed
            start += count
        return passed

    def read(self, model: torch.nn.Module, returned: Any) -> list[torch.Tensor]:
        """The states after the call, in slot order."""
        return [t for m in self.mechanisms for t in m.read(model, returned)]


def probe_call(model: torch.nn.Module, **extra: Any) -> Any:
    """The model's output for a meta call of two sequences of three tokens, with a cache."""
    ids = torch.zeros(2, 3, dtype=torch.long, device="meta")
    try:
        # as while tracing: transformers then skips its data-dependent shortcuts (mask checks that
        # read values), which meta tensors cannot answer
        with torch.no_grad(), mock.patch.object(torch.compiler, "is_compiling", lambda: True):
            return model(
                **accepted(model, input_ids=ids, use_cache=True, return_dict=True, **extra)
            )
    except Exception as exc:
        failures.check(exc)
        raise UnsupportedError(f"running the model with a cache failed: {_line(exc)}") from exc


def _layers_or_none(cache: Any) -> list[Any] | None:
    """A transformers Cache's layers (an EncoderDecoderCache's self-attention ones), if it has them."""
    self_attention = getattr(cache, "self_attention_cache", None)
    return getattr(self_attention if self_attention is not None else cache, "layers", None)


def _layers_of(cache: Any) -> list[Any]:
    layers = _layers_or_none(cache)
    if layers is None:
        raise UnsupportedError(
            f"the model keeps its state in {type(cache).__name__}, not a transformers Cache "
            "with layers"
        )
    return layers


def _per_layer_lists(cache: Any) -> list[StateSlot]:
    """States a Cache subclass keeps in its own list, one entry per layer (``[]`` for a layer
    without one): MiniMax's ``linear_cache`` of lightning-attention states."""
    slots: list[StateSlot] = []
    for name, held in vars(cache).items():
        if name == "layers" or not isinstance(held, list) or not held:
            continue
        if not all(isinstance(t, torch.Tensor) or t == [] for t in held):
            continue
        for i, state in enumerate(held):
            if isinstance(state, torch.Tensor):
                slots.append(StateSlot(i, name, name, ON_CACHE, tuple(state.shape), state.dtype))
    return slots


def _fresh_cache(template: Any) -> Any:
    """A copy of the probed cache whose layers can be filled without touching the template's."""
    cache = copy.copy(template)
    self_attention = getattr(template, "self_attention_cache", None)
    if self_attention is not None:  # EncoderDecoderCache: a decoder-only call uses the self part
        cache.self_attention_cache = _fresh_cache(self_attention)
        cache.cross_attention_cache = copy.deepcopy(template.cross_attention_cache)
        if isinstance(getattr(template, "is_updated", None), dict):
            cache.is_updated = dict(template.is_updated)
        return cache
    cache.layers = [_fresh_layer(layer) for layer in template.layers]
    return cache


def _fresh_layer(layer: Any) -> Any:
    """A copy of a probed cache layer, marked as holding a past, for the traced call to fill."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    fresh = copy.copy(layer)
    if isinstance(layer, DynamicSlidingWindowLayer):
        # keep every token, as a full layer does; the sliding-window mask does the windowing (the
        # window layer's own bookkeeping counts tokens in a Python int, fixed at trace time)
        for method in ("update", "get_mask_sizes", "get_seq_length"):
            setattr(fresh, method, types.MethodType(getattr(DynamicLayer, method), fresh))
    for attribute, _ in _RECURRENT:
        if isinstance(getattr(layer, attribute, None), dict):
            setattr(fresh, attribute, dict(getattr(layer, attribute)))
    for flags in ("is_conv_states_initialized", "is_recurrent_states_initialized"):
        if isinstance(getattr(layer, flags, None), dict):
            setattr(fresh, flags, dict(getattr(layer, flags)))
    if isinstance(getattr(layer, "has_previous_state", None), dict):
        # continuation form: the graph always starts from a state (zeros at the first call)
        fresh.has_previous_state = dict.fromkeys(layer.has_previous_state, True)
    return fresh


def _count_tokens_in_graph(
    layers: list[Any], slots: Sequence[StateSlot], tensors: Sequence[torch.Tensor]
) -> None:
    """Give each recurrent layer a token counter made inside the traced call.

    transformers' linear-attention layers count the tokens they have seen in a tensor they update
    in place (``cumulative_length_linear.add_``). Shared with the probed template, that tensor
    would be a constant of the graph that the graph mutates, which ``torch.export`` refuses. A
    fresh one per call starts at the past length where a growing state holds it (hybrid models),
    else at 0 (a purely recurrent model has no positions to count from it).
    """
    past = next((t.shape[s.token_axis] for s, t in zip(slots, tensors, strict=True) if s.grows), 0)
    for layer in layers:
        held = getattr(layer, "cumulative_length_linear", None)
        if isinstance(held, torch.Tensor):
            device = next((t.device for t in tensors), held.device)
            layer.cumulative_length_linear = torch.zeros((), dtype=held.dtype, device=device) + past


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]
