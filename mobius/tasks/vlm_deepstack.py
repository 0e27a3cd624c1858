"""Deepstack features (Qwen3-VL family): vision features from inner blocks of the tower that the
text model adds to its hidden states at the image-token positions after its first layers.

The vision graph outputs them as ``deepstack_features`` ``[layers, num_image_tokens, hidden]``
(the name of ``get_image_features``' output field; the order of ``image_features``). The
embedding graph places them at the image-token positions as it places ``image_features``
(``modality.at_placeholders``), zeros elsewhere, and outputs ``deepstack_visual_embeds`` ``[layers,
batch, sequence_length, hidden]``, which the decoder takes under transformers' argument name: a
client feeds the decoder without knowing where the image tokens are (a text-only step gives zero
feature rows and gets zeros). Adding zeros changes nothing, so the decoder adds the whole tensor
where transformers adds the image rows (``_deepstack_process``), with no data-dependent
selection.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from mobius.sources.config import ArchitectureConfig
from mobius.tasks.modality import at_placeholders

NAME = "deepstack_visual_embeds"  # transformers' argument name: the placed rows, per position
FEATURES = "deepstack_features"  # get_image_features' field: the rows, per image token
DEEPSTACK_LAYERS = "deepstack_layers"


def deepstack_layers(config: ArchitectureConfig) -> int:
    """How many deepstack feature sets the tower makes (0: none)."""
    vision = getattr(config.hf_config, "vision_config", None)
    return len(getattr(vision, "deepstack_visual_indexes", None) or ())


def stacked(features: Any) -> torch.Tensor | None:
    """``get_image_features``' ``deepstack_features`` (per layer: a tensor, or one per image) as
    ``[layers, num_image_tokens, hidden]``."""
    if not features:
        return None
    rows = []
    for layer in features:
        parts = layer if isinstance(layer, (list, tuple)) else [layer]
        rows.append(torch.cat([p.reshape(-1, p.shape[-1]) for p in parts], dim=0))
    return torch.stack(rows)


def placed_deepstack(is_image: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """The embedding graph's ``deepstack_visual_embeds``: ``features`` ``[layers,
    num_image_tokens, hidden]`` at the image-token positions, zeros elsewhere."""
    picked, placed = at_placeholders(is_image, features)
    return torch.where(placed.unsqueeze(-1), picked, torch.zeros_like(picked))


def _text_model(model: torch.nn.Module) -> torch.nn.Module:
    for module in model.modules():
        forward = getattr(type(module), "forward", None)
        if forward is not None and NAME in inspect.signature(forward).parameters:
            return module
    raise ValueError(f"{type(model).__name__} has no module that takes {NAME}")


@contextlib.contextmanager
def added_deepstack(model: torch.nn.Module, placed: torch.Tensor | None) -> Iterator[None]:
    """The text model called with ``placed`` (``[layers, batch, sequence, hidden]``) as its
    deepstack features, each added whole to the hidden states."""
    if placed is None:
        yield
        return
    text = _text_model(model)
    forward = text.forward

    def with_deepstack(*args: Any, **kwargs: Any) -> Any:
        kwargs[NAME] = list(placed.unbind(0))
        kwargs["visual_pos_masks"] = placed.new_ones(placed.shape[1:3], dtype=torch.bool)
        return forward(*args, **kwargs)

    def add_whole(hidden: torch.Tensor, mask: Any, embeds: torch.Tensor) -> torch.Tensor:
        return hidden + embeds.to(hidden.dtype)

    text.forward = with_deepstack
    text._deepstack_process = add_whole
    try:
        yield
    finally:
        del text.forward
        del text._deepstack_process
