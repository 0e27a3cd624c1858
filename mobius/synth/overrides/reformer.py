"""Reformer: axial position encodings looked up for the whole batch at once."""

from __future__ import annotations

import torch


def axial_positions_gathered(module: torch.nn.Module) -> None:
    # In eval mode HF cuts the axial table to the rows the largest position id needs (a .item() on
    # the ids, which fixes the traced shapes) and then picks each batch row's positions in a
    # Python loop over the batch (which fixes the batch). Row p of the flattened table is the same
    # whether the table was cut or not, so the whole table is built and indexed by position ids.
    def forward(position_ids: torch.Tensor) -> torch.Tensor:
        full_shape = (1, *module.axial_pos_shape)
        parts = [weight.expand(full_shape + weight.shape[-1:]) for weight in module.weights]
        table = torch.cat(parts, dim=-1).reshape(-1, sum(module.axial_pos_embds_dim))
        return table[position_ids]

    module.forward = forward


def refuse_chunked_lengths(module: torch.nn.Module) -> None:
    """``ReformerModel`` whose position table is longer than its attention chunks: above a chunk
    HF pads to whole chunks and hashes the keys with random rotations (LSH, unless ``hash_seed``
    fixes them), so the trace holds up to one chunk only and a causal graph cannot carry that
    bound. Refused before tracing, with the lengths that say so."""
    from mobius.errors import ConfigError

    config = module.config
    chunk = {"lsh": config.lsh_attn_chunk_length, "local": config.local_attn_chunk_length}
    shortest = min(chunk[kind] for kind in set(config.attn_layers))
    if config.max_position_embeddings > shortest:
        raise ConfigError(
            f"reformer: max_position_embeddings ({config.max_position_embeddings}) is longer than "
            f"its attention chunks ({shortest} tokens); above one chunk HF pads to whole chunks "
            "and hashes keys with random rotations, which one graph for every length cannot hold"
        )
