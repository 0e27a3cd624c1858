"""How the VLM decoder graph calls the model: the contract's positions as the model numbers them,
a cache read as not yet filled (PaliGemma's prefix), and transformers' extra mask functions as
plain indexing (no ``torch.vmap``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from mobius.tasks.positions import position_offset


def _model_positions(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict:
    """The contract's ``position_ids`` (from 0) as the model reads them: shifted by what its
    ``prepare_inputs_for_generation`` adds, and by the first real position of embeddings that
    number positions from ``padding_idx + 1`` (Kosmos-2's sinusoidal table: ``tasks/positions``)."""
    offset = generation_position_offset(model) + position_offset(model)
    if not offset or "position_ids" not in inputs:
        return inputs
    return {**inputs, "position_ids": inputs["position_ids"] + offset}


def generation_position_offset(model: torch.nn.Module) -> int:
    """What the model's own ``prepare_inputs_for_generation`` adds to mask-derived position ids
    (PaliGemma numbers positions from 1): asked once, on one token, as ``generate`` would."""
    cached = getattr(model, "_mobius_position_offset", None)
    if cached is not None:
        return cached
    ids = torch.zeros((1, 1), dtype=torch.long)
    offset = 0
    try:
        prepared = model.prepare_inputs_for_generation(
            ids, attention_mask=torch.ones_like(ids), position_ids=ids.clone(), use_cache=False
        )
        given = prepared.get("position_ids")
        if isinstance(given, torch.Tensor) and given.numel() == 1:
            offset = int(given.reshape(-1)[0])
    except Exception as exc:  # noqa: BLE001 - a model whose preparation needs more: no offset
        from mobius import failures

        failures.raise_if_fatal(exc)  # an interrupt or out-of-memory still stops the build
        offset = 0
    object.__setattr__(model, "_mobius_position_offset", offset)
    return offset


@contextlib.contextmanager
def _as_first_call(cache: Any) -> Iterator[None]:
    """The cache reads as not yet filled, so that a model applying ``token_type_ids`` only on its
    first call (PaliGemma's bidirectional prefix) applies them in the one graph for every call.
    On later steps the new tokens' types mark no block over past positions, so nothing changes."""
    cls = type(cache)
    if not hasattr(cls, "is_initialized"):
        yield
        return
    own = cls.__dict__.get("is_initialized")
    cls.is_initialized = property(lambda self: False)
    try:
        yield
    finally:
        if own is None:
            del cls.is_initialized
        else:
            cls.is_initialized = own


@contextlib.contextmanager
def masks_without_vmap() -> Iterator[None]:
    """transformers builds masks with extra mask functions (Gemma 3's image blocks, an
    ``or_mask_function``) through ``torch.vmap``, which nothing lowers; the same functions
    evaluated on broadcast index tensors (its default path) give the same mask, as plain
    indexing ops."""
    from transformers import masking_utils

    expand = masking_utils._non_vmap_expansion_sdpa

    def broadcast(mask_function: Any) -> Any:
        def expanded(batch: Any, head: Any, query: Any, key: Any) -> torch.Tensor:
            mask = mask_function(*expand(batch, head, query, key))
            return mask.expand(batch.shape[0], -1, query.shape[0], key.shape[0])

        return expanded

    # and without the mode that turns tensor indexing into a higher-order op for vmap
    original = masking_utils._vmap_expansion_sdpa, masking_utils.TransformGetItemToIndex
    masking_utils._vmap_expansion_sdpa = broadcast
    masking_utils.TransformGetItemToIndex = contextlib.nullcontext
    try:
        yield
    finally:
        masking_utils._vmap_expansion_sdpa, masking_utils.TransformGetItemToIndex = original
