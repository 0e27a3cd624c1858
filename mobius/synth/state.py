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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from unittest import mock

import torch

from mobius.errors import UnsupportedError
from mobius.tasks.base import BATCH, PAST, TensorSpec
from mobius.tasks.causal_lm import cache_input_name, cache_output_name

# Cache-layer attributes that hold tensors, and the contract's name for each kind of state.
_KV = (("keys", "key"), ("values", "value"))
_RECURRENT = (("conv_states", "conv_state"), ("recurrent_states", "recurrent_state"))


@dataclass(frozen=True)
class StateSlot:
    """One tensor a model carries from one call to the next."""

    layer: int
    kind: str  # key, value, conv_state, recurrent_state (with _{j} when a layer has several)
    attribute: str  # where the mechanism keeps it: keys, values, conv_states, a module attribute
    index: Any  # the mechanism's own address within ``attribute`` (None for key/value)
    shape: tuple[int, ...]  # as probed; the batch and, for key/value, the past length vary
    dtype: torch.dtype
    grows: bool = (
        False  # key/value states grow by one entry per token; the others have a fixed size
    )

    def spec(self) -> TensorSpec:
        dims: list[str | int] = [BATCH, *self.shape[1:]]
        if self.grows:
            dims[-2] = PAST
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
        cache = copy.copy(self.template)
        cache.layers = [_fresh_layer(layer) for layer in self.template.layers]
        for slot, tensor in zip(self.slots, tensors, strict=True):
            layer = cache.layers[slot.layer]
            if slot.index is None:
                setattr(layer, slot.attribute, tensor)
                layer.device = tensor.device
            else:  # recurrent layers update these in place: give them their own copy
                getattr(layer, slot.attribute)[slot.index] = tensor.clone()
        return cache

    def read(self, model: torch.nn.Module, returned: Any) -> list[torch.Tensor]:
        layers = _layers_of(returned)
        out = []
        for slot in self.slots:
            held = getattr(layers[slot.layer], slot.attribute)
            out.append(held if slot.index is None else held[slot.index])
        return out

    @classmethod
    def probe(cls, cache: Any) -> TransformersCache | None:
        layers = getattr(cache, "layers", None)
        if cache is not None and getattr(cache, "self_attention_cache", None) is not None:
            layers = cache.self_attention_cache.layers  # EncoderDecoderCache
        if layers is None:
            return None
        slots: list[StateSlot] = []
        for i, layer in enumerate(layers):
            for attribute, kind in _KV:
                held = getattr(layer, attribute, None)
                if isinstance(held, torch.Tensor) and held.dim() == 4:
                    slots.append(
                        StateSlot(i, kind, attribute, None, tuple(held.shape), held.dtype, True)
                    )
            for attribute, kind in _RECURRENT:
                held = getattr(layer, attribute, None) or {}
                for j, state in sorted(held.items()):
                    if isinstance(state, torch.Tensor):
                        name = kind if len(held) == 1 else f"{kind}_{j}"
                        shape = tuple(state.shape)
                        slots.append(StateSlot(i, name, attribute, j, shape, state.dtype))
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


def probe_layout(model: torch.nn.Module) -> CacheLayout:
    """Run the meta model once with a cache and describe what it carries afterwards."""
    from mobius.synth.state_adapters import probe_mechanisms

    mechanisms = probe_mechanisms(model, _probe_call)
    if not mechanisms:
        raise UnsupportedError("the model's cache holds no tensors after a call")
    return CacheLayout(mechanisms)


def _probe_call(model: torch.nn.Module, **extra: Any) -> Any:
    """The model's output for a meta call of two sequences of three tokens, with a cache."""
    ids = torch.zeros(2, 3, dtype=torch.long, device="meta")
    try:
        # as while tracing: transformers then skips its data-dependent shortcuts (mask checks that
        # read values), which meta tensors cannot answer
        with torch.no_grad(), mock.patch.object(torch.compiler, "is_compiling", lambda: True):
            return model(input_ids=ids, use_cache=True, return_dict=True, **extra)
    except Exception as exc:
        raise UnsupportedError(f"running the model with a cache failed: {_line(exc)}") from exc


def _layers_of(cache: Any) -> list[Any]:
    self_attention = getattr(cache, "self_attention_cache", None)  # EncoderDecoderCache
    layers = getattr(self_attention if self_attention is not None else cache, "layers", None)
    if layers is None:
        raise UnsupportedError(
            f"the model keeps its state in {type(cache).__name__}, not a transformers Cache "
            "with layers"
        )
    return layers


def _fresh_layer(layer: Any) -> Any:
    """A copy of a probed cache layer, marked as holding a past, for the traced call to fill."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    if isinstance(layer, DynamicSlidingWindowLayer) and not hasattr(layer, "conv_states"):
        fresh = DynamicLayer()  # keep every token; the sliding-window mask does the windowing
        fresh.is_initialized = layer.is_initialized
    else:
        fresh = copy.copy(layer)
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


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]
