"""The cache as code written before transformers' ``Cache`` keeps it: a tuple with one
``(key, value)`` pair per layer, taken as ``past_key_values`` and returned grown by the new tokens.

Each tensor is one slot, ``past_key_values.{i}.key`` / ``.value`` in and ``present.{i}.key`` /
``.value`` out (more than two per layer: ``state_{j}``), its token axis the one the probe call's
tokens fill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mobius.synth.state import StateSlot

PROBE_TOKENS = 3  # the tokens of the probe call (``state.probe_call``)
_NAMES = ("key", "value")


@dataclass
class LegacyTuples:
    """``((key, value), ...)`` per layer (``layer`` and ``index`` of a slot address it)."""

    slots: list[StateSlot]

    def fill(self, model: torch.nn.Module, tensors: Sequence[torch.Tensor]) -> tuple:
        layers: dict[int, list[torch.Tensor]] = {}
        for slot, tensor in zip(self.slots, tensors, strict=True):
            layers.setdefault(slot.layer, []).append(tensor)
        return tuple(tuple(layers[i]) for i in sorted(layers))

    def read(self, model: torch.nn.Module, returned: Any) -> list[torch.Tensor]:
        return [returned[slot.layer][slot.index] for slot in self.slots]

    @classmethod
    def probe(cls, state: Any) -> LegacyTuples | None:
        """The slots of a probed tuple cache; None where ``state`` is no such tuple."""
        if not isinstance(state, (tuple, list)) or not state:
            return None
        if not all(
            isinstance(layer, (tuple, list)) and layer
            and all(isinstance(t, torch.Tensor) for t in layer)
            for layer in state
        ):  # fmt: skip
            return None
        slots = []
        for i, layer in enumerate(state):
            for j, tensor in enumerate(layer):
                axis = _token_axis(tensor)
                if axis is None:
                    return None
                kind = _NAMES[j] if len(layer) == len(_NAMES) else f"state_{j}"
                attribute = {"key": "keys", "value": "values"}.get(kind, kind)  # as a Cache's
                shape = tuple(tensor.shape)
                slots.append(StateSlot(i, kind, attribute, j, shape, tensor.dtype, 0, axis))
        return cls(slots)


def _token_axis(tensor: torch.Tensor) -> int | None:
    """The axis past the batch that holds the probe's tokens: ``[batch, heads, tokens, dim]``'s
    third where several could."""
    axes = [a for a in range(1, tensor.dim()) if tensor.shape[a] == PROBE_TOKENS]
    if len(axes) > 1 and 2 in axes:
        return 2
    return axes[0] if axes else None
