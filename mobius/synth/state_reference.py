"""Reference sliding-window cache layers carried through the trace (Unlimited-OCR's R-SWA).

A reference layer keeps the prompt's keys and values for good (``prefill_keys``) beside a sliding
window of the tokens decoded after it; the model's mask lets a query see every prompt token and
the last ``sliding_window`` tokens. Traced, the layer keeps every token in one key/value state (as
``state.py`` does for any sliding-window layer) and carries the prompt's length, in cache slots, as
one more state, ``past_key_values.{i}.prefill_length`` (int64 ``[batch]``, every row the same): 0
before the first call, which is the prompt (HF's first ``update``), and set to the cache's length
after it. The model's own mask then applies both the window and the prompt's exception.
"""

from __future__ import annotations

from typing import Any

import torch

# StateSlot.index of a reference layer's prompt length
PREFILL_LENGTH = "prefill length"
# the prompt length a query sees during the prompt itself: every key (HF's ``inf``)
_WHOLE_PROMPT = torch.iinfo(torch.int64).max


def is_reference_layer(layer: Any) -> bool:
    """A cache layer that keeps the prompt's keys apart from its sliding window."""
    return getattr(layer, "_layer_type", None) == "reference_sliding_attention" and isinstance(
        getattr(layer, "prefill_keys", None), torch.Tensor
    )


def reference_slots(layer_index: int, layer: Any, slot_type: type) -> list[Any]:
    """The layer's key/value states (shaped as its probed prompt keys: the window part is empty
    after the probe's one call) and its prompt length."""
    keys, values = layer.prefill_keys, layer.prefill_values
    batch = keys.shape[0]
    return [
        slot_type(layer_index, "key", "keys", None, tuple(keys.shape), keys.dtype, 0, 2),
        slot_type(layer_index, "value", "values", None, tuple(values.shape), values.dtype, 0, 2),
        slot_type(
            layer_index, "prefill_length", "prefill_length", PREFILL_LENGTH, (batch,), torch.int64
        ),
    ]


def fill_prefill_length(layer: Any, carried: torch.Tensor) -> None:
    """Install the carried prompt length: what the model's mask reads as ``layer.prefill_length``
    (a 0-d tensor; every key during the prompt itself)."""
    layer.carried_prefill_length = carried
    seen = carried.max()
    layer.prefill_length = torch.where(seen > 0, seen, torch.full_like(seen, _WHOLE_PROMPT))


def read_prefill_length(layer: Any) -> torch.Tensor:
    """The prompt length after the call: the carried one, or the cache's length after the prompt."""
    carried = layer.carried_prefill_length
    length = torch.full_like(carried, 0) + layer.keys.shape[-2]
    return torch.where(carried > 0, carried, length)
