"""What the image and audio three-graph tasks share: a modality encoder's rows placed at the
placeholder tokens of the prompt (``embedding.onnx``), as the HF models' ``masked_scatter`` does.

``vlm.py`` (images) and ``audio_llm.py`` (audio) are the two instances: each has an encoder graph
that outputs ``<modality>_features`` ``[num_tokens, hidden]``, an embedding graph that takes
``input_ids`` and those features, and the causal decoder on ``inputs_embeds``.
"""

from __future__ import annotations

import torch


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


def scatter_features(
    embed: torch.nn.Module, input_ids: torch.Tensor, features: torch.Tensor, token: int
) -> torch.Tensor:
    """The token embeddings with the i-th ``token`` position holding the i-th feature row
    (``masked_scatter``'s order). Placeholder tokens beyond the features (all of them with no
    features: a decode step) keep their own embeddings, as in the HF forward without the
    modality's inputs."""
    is_placeholder = input_ids == token
    ids = input_ids
    if token >= embed.num_embeddings:  # Gemma 3: the image token lies past the table
        ids = torch.where(is_placeholder, torch.zeros_like(input_ids), input_ids)
    return placed_rows(embed(ids), is_placeholder, features)


def placed_rows(
    embeds: torch.Tensor, is_placeholder: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """``embeds`` ``[batch, sequence, hidden]`` with the i-th placeholder position holding the
    i-th row of ``rows`` (``at_placeholders``); placeholders beyond the rows keep their own."""
    picked, placed = at_placeholders(is_placeholder, rows.to(embeds.dtype))
    return torch.where(placed.unsqueeze(-1), picked, embeds)
