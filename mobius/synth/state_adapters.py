"""How a model exposes its state, one small adapter per mechanism (not per model type).

``state.py`` carries a transformers ``Cache``; some models keep their state another way. Each
adapter here names that state's tensors as ``StateSlot``s (``past_key_values.{i}.<state>`` in,
``present.{i}.<state>`` out), installs graph inputs as the past before the traced call, and reads
the states back after it. ``probe_mechanisms`` picks the adapters from one meta call.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mobius.errors import UnsupportedError
from mobius.synth.state import (
    CacheLayout,
    StateMechanism,
    StateSlot,
    TransformersCache,
    probe_call,
)
from mobius.synth.state_tuples import LegacyTuples
from mobius.tasks.causal_lm import CACHE_ARGUMENTS, returned_cache

PROBE_BATCH = 2  # the batch of the probe call (state.probe_call)


@dataclass
class StateList:
    """``model(state=[t0, t1, ...])`` returning the list updated as ``out.state`` (RWKV).

    A tensor with an axis as long as the layer count holds one slice per layer: each slice is its
    own slot (``past_key_values.{layer}.state_{k}``), stacked back along that axis for the call.
    """

    slots: list[StateSlot]
    axes: list[int | None]  # per list entry, its layer axis (None: the whole tensor, layer 0)

    def fill(self, model: torch.nn.Module, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        parts: dict[int, list[torch.Tensor]] = {}
        for slot, tensor in zip(self.slots, tensors, strict=True):
            parts.setdefault(slot.index, []).append(tensor)
        return [  # fresh tensors: the model writes into them in place
            parts[k][0].clone() if axis is None else torch.stack(parts[k], dim=axis)
            for k, axis in enumerate(self.axes)
        ]

    def read(self, model: torch.nn.Module, returned: Any) -> list[torch.Tensor]:
        out = []
        for slot in self.slots:
            entry, axis = returned[slot.index], self.axes[slot.index]
            out.append(entry if axis is None else entry.select(axis, slot.layer))
        return out

    @classmethod
    def probe(cls, state: Any, layers: int) -> StateList | None:
        if not isinstance(state, (list, tuple)) or not state:
            return None
        if not all(isinstance(t, torch.Tensor) for t in state):
            return None
        axes = [_layer_axis(t, layers) for t in state]
        slots = [
            StateSlot(layer, f"state_{k}", "state", k, _without(tuple(t.shape), axis), t.dtype)
            for layer in range(layers)
            for k, (t, axis) in enumerate(zip(state, axes, strict=True))
            if axis is not None or layer == 0
        ]
        return cls(slots, axes)


@dataclass
class StateDict:
    """A cache object of the model's own (not a transformers Cache) holding ``{layer: (tensor,
    ...)}`` in one attribute, which the model updates in place (xLSTM's ``rnn_state``)."""

    slots: list[StateSlot]
    template: Any
    attribute: str

    def fill(self, model: torch.nn.Module, tensors: Sequence[torch.Tensor]) -> Any:
        cache = copy.copy(self.template)
        held: dict[int, list[torch.Tensor]] = {}
        for slot, tensor in zip(self.slots, tensors, strict=True):
            held.setdefault(slot.layer, []).append(tensor.clone())
        setattr(cache, self.attribute, {layer: tuple(ts) for layer, ts in held.items()})
        for name, value in vars(self.template).items():
            # bookkeeping tensors (a token counter) are not carried: a fresh one per call
            if isinstance(value, torch.Tensor):
                setattr(cache, name, torch.zeros(value.shape, dtype=value.dtype))
        return cache

    def read(self, model: torch.nn.Module, returned: Any) -> list[torch.Tensor]:
        held = getattr(returned, self.attribute)
        return [held[slot.layer][slot.index] for slot in self.slots]

    @classmethod
    def probe(cls, cache: Any) -> StateDict | None:
        for name, value in vars(cache).items() if hasattr(cache, "__dict__") else ():
            if not isinstance(value, dict) or not value:
                continue
            if not all(
                isinstance(k, int) and isinstance(v, (tuple, list)) and v
                and all(isinstance(t, torch.Tensor) for t in v)
                for k, v in value.items()
            ):  # fmt: skip
                continue
            slots = [
                StateSlot(
                    layer, name if len(ts) == 1 else f"{name}_{j}", name, j, tuple(t.shape), t.dtype
                )
                for layer, ts in sorted(value.items())
                for j, t in enumerate(ts)
            ]
            return cls(slots, cache, name)
        return None


@dataclass
class ModuleStates:
    """States kept in the modules' own attributes, reassigned by every cached call and returned
    nowhere (RecurrentGemma's ``conv1d_state`` and ``recurrent_states``)."""

    slots: list[StateSlot]  # attribute: the module's path; index: the attribute's name

    def fill(self, model: torch.nn.Module, tensors: Sequence[torch.Tensor]) -> None:
        for slot, tensor in zip(self.slots, tensors, strict=True):
            object.__setattr__(model.get_submodule(slot.attribute), slot.index, tensor.clone())

    def read(self, model: torch.nn.Module, returned: Any) -> list[torch.Tensor]:
        return [getattr(model.get_submodule(s.attribute), s.index) for s in self.slots]

    @classmethod
    def probe(
        cls, model: torch.nn.Module, before: dict[tuple[str, str], int]
    ) -> ModuleStates | None:
        slots: list[StateSlot] = []
        for path, attribute, value in _plain_tensors(model):
            if before.get((path, attribute)) == id(value) or not value.dim():
                continue
            if value.shape[0] != PROBE_BATCH:
                continue  # not per sequence (a cached table, say)
            layer = next((int(p) for p in path.split(".") if p.isdigit()), 0)
            kinds = {s.kind for s in slots if s.layer == layer}
            kind = attribute if attribute not in kinds else f"{attribute}_{len(kinds)}"
            slots.append(StateSlot(layer, kind, path, attribute, tuple(value.shape), value.dtype))
        return cls(slots) if slots else None


def probe_mechanisms(model: torch.nn.Module, call: Callable[..., Any]) -> list[StateMechanism]:
    """The adapters for what ``model`` carries, from meta calls made with ``call(model, **kw)``."""
    before = _attribute_ids(model)
    state = returned_cache(call(model))
    if state is not None:
        found = (
            TransformersCache.probe(state)
            or LegacyTuples.probe(state)
            or StateList.probe(state, model.config.get_text_config(decoder=True).num_hidden_layers)
            or StateDict.probe(state)
        )
        if found is None:
            raise UnsupportedError(
                f"the model keeps its state in {type(state).__name__}, which no state adapter reads"
            )
        return [found]
    # the model returns no state: hand it a cache for its attention layers, and look for states
    # its modules keep for themselves
    argument = next((n for n in CACHE_ARGUMENTS if n in _parameters(model)), None)
    if argument is None:
        raise UnsupportedError("the model neither returns a cache nor takes one")
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    before.update(_attribute_ids(model))
    call(model, **{argument: cache})
    mechanisms = [TransformersCache.probe(cache), ModuleStates.probe(model, before)]
    return [m for m in mechanisms if m is not None]


def _parameters(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _plain_tensors(model: torch.nn.Module):
    """(module path, attribute, tensor) for tensors held as plain attributes (not weights)."""
    for path, module in model.named_modules():
        for attribute, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                yield path, attribute, value


def _attribute_ids(model: torch.nn.Module) -> dict[tuple[str, str], int]:
    """Which tensor each plain attribute holds now, to see which ones a call reassigns."""
    return {(path, attribute): id(value) for path, attribute, value in _plain_tensors(model)}


def _layer_axis(tensor: torch.Tensor, layers: int) -> int | None:
    """The one axis past the batch as long as the layer count, if exactly one is."""
    axes = [a for a in range(1, tensor.dim()) if tensor.shape[a] == layers]
    return axes[0] if len(axes) == 1 else None


def _without(shape: tuple[int, ...], axis: int | None) -> tuple[int, ...]:
    return shape if axis is None else shape[:axis] + shape[axis + 1 :]


def probe_layout(model: torch.nn.Module) -> CacheLayout:
    """Run the meta model once with a cache and describe what it carries afterwards."""
    with _attributes_restored(model):
        mechanisms = probe_mechanisms(model, probe_call)
    if not mechanisms:
        raise UnsupportedError("the model's cache holds no tensors after a call")
    return CacheLayout(mechanisms)


@contextlib.contextmanager
def _attributes_restored(model: torch.nn.Module) -> Iterator[None]:
    """Undo the plain tensor attributes a probe call sets on the modules (tables computed on first
    use, module-held states): the traced call must start from the model as built, or a table the
    probe made on meta would stand where the trace computes the real one."""
    before = {module: dict(vars(module)) for module in model.modules()}
    try:
        yield
    finally:
        for module, attributes in before.items():
            for name, value in list(vars(module).items()):
                if isinstance(value, torch.Tensor) and attributes.get(name) is not value:
                    if name in attributes:
                        object.__setattr__(module, name, attributes[name])
                    else:
                        delattr(module, name)
