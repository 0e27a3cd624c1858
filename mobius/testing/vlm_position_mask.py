"""Parity inputs and HF reference for VLMs that place features by ``image_embeds_position_mask``
(Kosmos-2, Kosmos-2.5: ``tasks/vlm_position_mask.py``).

The prompt's image runs hold the ids the Kosmos-2 processor writes (the ids after ``<unk>``,
restarting per image), marked 1 in the mask. Their text models number positions from
``padding_idx + 1`` and derive them from ``input_ids`` when given none (``tasks/positions``):
over a whole left-padded prompt that numbering skips the pads, as the contract's does. HF's cached
steps instead count from the cache's length, pads included (``cache_length + 1 + padding_idx``):
on a left-padded row HF ``generate``'s positions jump by the number of pads after the prompt, so
its own cached decoding disagrees with its own forward there. The reference for these models is
therefore HF's forward over the whole sequence (no cache, no ``position_ids``: HF's own
numbering) for the prefill, the cached step and each greedy step; HF ``generate`` is compared with
it row by row and reported beside (``vlm_row_reference.reference_agreement``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mobius.tasks.positions import position_offset
from mobius.tasks.vlm import language_model
from mobius.tasks.vlm_position_mask import NAME
from mobius.verification.pairs import to_numpy

FIRST_IMAGE_ID = 4  # Kosmos-2's processor: unk_token_id + 1


def with_position_mask(ids: torch.Tensor, runs: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids`` with its placeholder positions (-1: no image token) as the processor writes them
    (``FIRST_IMAGE_ID`` on, restarting per image of ``runs[0]`` features), and the mask marking
    them (1) for ``image_embeds_position_mask``."""
    marked = ids == -1
    order = torch.cumsum(marked.reshape(-1).long(), 0).reshape(ids.shape) - 1
    ids = torch.where(marked, FIRST_IMAGE_ID + order % runs[0], ids)
    return ids, marked.long()


def derives_own_positions(model: Any) -> bool:
    """Whether the reference must be HF's uncached forward: its text model numbers positions
    from ``padding_idx + 1`` from ``input_ids`` (its cached steps count pads)."""
    return position_offset(language_model(model)) > 0


def _extended(inputs: dict, tokens: torch.Tensor) -> dict:
    """``inputs`` with ``tokens`` appended: real, and no image position."""
    out = dict(inputs)
    out["input_ids"] = torch.cat([inputs["input_ids"], tokens], 1)
    out["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(tokens)], 1)
    if NAME in inputs:
        out[NAME] = torch.cat([inputs[NAME], torch.zeros_like(tokens)], 1)
    return out


def _forward(model: Any, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs, use_cache=False).logits


def uncached_reference(
    model: Any, inputs: dict, step: torch.Tensor, new_tokens: int
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
    """HF's forward over the whole sequence: the prompt's logits, ``step``'s logits after the
    prompt, and ``new_tokens`` greedy tokens with each step's last logits."""
    prefill = _forward(model, inputs)
    stepped = _forward(model, _extended(inputs, step))[:, -1:]
    tokens, seen, current = [], [], inputs
    for _ in range(new_tokens):
        last = _forward(model, current)[:, -1]
        seen.append(last)
        token = last.argmax(-1, keepdim=True)
        tokens.append(token)
        current = _extended(current, token)
    return prefill, stepped, torch.cat(tokens, 1).numpy(), to_numpy(torch.stack(seen, 1))


# what this module's reference is, as vlm_row_reference.reference_agreement reports it
REFERENCE = "HF's forward over the whole sequence (its cached steps count pads as positions)"
