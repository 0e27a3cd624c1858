"""Image features placed by a per-token mask instead of an image token (Kosmos-2, Kosmos-2.5).

Their processors put distinct ids after ``<image>`` (Kosmos-2: the ids after ``<unk>``;
Kosmos-2.5: ``<s>``) and mark the positions the features go to in ``image_embeds_position_mask``
(``[batch, sequence]``); the config names no image token. So the embedding graph takes that mask
under its HF name (CONTRACTS.md: optional HF inputs keep their name on the graph that reads them)
and places the i-th feature row at the i-th marked position (the shared gather,
``modality.placed_rows``), as the HF text model's ``inputs_embeds[mask] = image_embeds`` does.

Kosmos-2.5's text model also reads the mask at every call: a segment embedding per position
(``segment_emb``, 1 wherever the mask is non-zero: the image tokens and the ``<image>`` /
``</image>`` markers, which its processor marks with -1), so its decoder takes the mask too (zeros
on the cached steps, as HF's ``generate`` passes none there). Kosmos-2's decoder does not read it.

Both forwards need the image or its embeddings (Kosmos-2 raises without them), so the decoder graph
runs their ``text_model`` (a causal LM with its head) on ``inputs_embeds``.
"""

from __future__ import annotations

import inspect

import torch

from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec
from mobius.tasks.modality import placed_rows

NAME = "image_embeds_position_mask"


def places_by_position_mask(model: torch.nn.Module | type) -> bool:
    """Whether the model's forward places image features by ``image_embeds_position_mask``."""
    return NAME in inspect.signature(model.forward).parameters


def decoder_reads_position_mask(model: torch.nn.Module) -> bool:
    """Whether the text model reads the mask beyond placing the features: Kosmos-2.5's segment
    embedding (``segment_emb``), added at every position on every call."""
    text = getattr(model, "text_model", None)
    return (
        places_by_position_mask(model)
        and text is not None
        and any(name.endswith("segment_emb") for name, _ in text.named_modules())
    )


def position_mask_spec() -> TensorSpec:
    """``image_embeds_position_mask`` int64 ``[batch, sequence_length]`` (the processor's values:
    1 at a feature's position; Kosmos-2.5 also -1 at its image markers)."""
    return TensorSpec(NAME, torch.int64, (BATCH, SEQUENCE))


def place_by_mask(
    model: torch.nn.Module, input_ids: torch.Tensor, mask: torch.Tensor, features: torch.Tensor
) -> torch.Tensor:
    """The raw token embeddings (the text model scales them itself) with the i-th feature row at
    the i-th position whose mask is 1 (both families' processors mark feature positions with 1;
    Kosmos-2.5 places at ``mask == 1``, Kosmos-2 at any non-zero value, which its processor
    never writes other than 1)."""
    embeds = model.get_input_embeddings()(input_ids)
    return placed_rows(embeds, mask == 1, features)


def mask_manifest(model_class: type) -> dict[str, str]:
    """What ``mobius.json`` tells a client of a mask-placing model: the features go where the
    embedding graph's ``image_embeds_position_mask`` says (no image token)."""
    return {"image_placement": "position-mask"} if places_by_position_mask(model_class) else {}
