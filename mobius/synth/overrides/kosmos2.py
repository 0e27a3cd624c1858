"""Kosmos-2: its forward with neither the image nor its embeddings runs its text model."""

from __future__ import annotations

import functools
from typing import Any

import torch


def text_call_without_image(module: torch.nn.Module) -> None:
    # Kosmos2ForConditionalGeneration.forward raises without pixel_values or image_embeds, cached
    # steps included (its generate computes the image embeddings once and calls its text model
    # directly). The decoder graph runs that text model (tasks/vlm_position_mask.py); the meta
    # probe that reads the cache layout calls the whole model with token ids only, so such a call
    # runs the text model on what it was given, as generate's later steps do.
    original = module.forward

    @functools.wraps(original)  # the signature stays the HF forward's
    def forward(*args: Any, **kwargs: Any):
        if args or kwargs.get("pixel_values") is not None or kwargs.get("image_embeds") is not None:
            return original(*args, **kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("pixel_values", "image_embeds")}
        return module.text_model(**kwargs)

    module.forward = forward
