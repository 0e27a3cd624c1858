"""What the image and audio tasks share: modality encoders whose rows are placed at the
placeholder tokens of the prompt (``embedding.onnx``), as the HF models' ``masked_scatter`` does,
then the causal decoder on ``inputs_embeds``.

A model has one or more modalities (``Modality``): each an encoder graph that outputs
``<modality>_features`` ``[num_tokens, hidden]`` and an input of the one embedding graph, which
places every modality's rows at that modality's own placeholder token. ``vlm.py`` is the image
instance, ``audio_llm.py`` the audio instance and, for models with both (Qwen-Omni thinkers),
the two together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Modality:
    """One encoder → embedding path: its name (``mobius.json``'s ``modalities``), its encoder
    graph, the features that graph outputs and the embedding graph takes, the axis of their rows,
    and the placeholder token the config names for it."""

    name: str
    encoder: str
    features: str
    rows: str
    token: Callable[[Any], int | None]


def at_placeholders(
    is_placeholder: torch.Tensor, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The i-th placeholder position's row of ``rows`` ``[..., num_rows, hidden]``
    (``masked_scatter``'s order, row-major over the batch) as ``[..., batch, sequence, hidden]``,
    and where a row was placed (``[batch, sequence]``: placeholders past the rows get none).
    Written as a gather, so no count is data-dependent: one zero row is appended so that the
    gather has a row to read with no rows given."""
    lead, hidden = rows.shape[:-2], rows.shape[-1]
    padded = torch.cat([rows, rows.new_zeros((*lead, 1, hidden))], dim=-2)
    order = torch.cumsum(is_placeholder.to(torch.int64).reshape(-1), 0) - 1
    picked = padded.index_select(-2, order.clamp(min=0))
    placed = is_placeholder & (order < rows.shape[-2]).reshape(is_placeholder.shape)
    return picked.reshape(*lead, *is_placeholder.shape, hidden), placed


def place_features(
    embeds: torch.Tensor, input_ids: torch.Tensor, features: torch.Tensor, token: int
) -> torch.Tensor:
    """``embeds`` with the i-th ``token`` position holding the i-th feature row; placeholder
    tokens beyond the features (all of them with no features: a decode step) keep their rows."""
    return placed_rows(embeds, input_ids == token, features)


def placed_rows(
    embeds: torch.Tensor, is_placeholder: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """``embeds`` ``[batch, sequence, hidden]`` with the i-th placeholder position holding the
    i-th row of ``rows`` (``at_placeholders``); placeholders beyond the rows keep their own."""
    picked, placed = at_placeholders(is_placeholder, rows.to(embeds.dtype))
    return torch.where(placed.unsqueeze(-1), picked, embeds)


def scatter_features(
    embed: torch.nn.Module, input_ids: torch.Tensor, features: torch.Tensor, token: int
) -> torch.Tensor:
    """The token embeddings with the i-th ``token`` position holding the i-th feature row
    (``masked_scatter``'s order). Placeholder tokens beyond the features (all of them with no
    features: a decode step) keep their own embeddings, as in the HF forward without the
    modality's inputs."""
    ids = input_ids
    if token >= embed.num_embeddings:  # Gemma 3: the image token lies past the table
        ids = torch.where(input_ids == token, torch.zeros_like(input_ids), input_ids)
    return place_features(embed(ids), input_ids, features, token)
