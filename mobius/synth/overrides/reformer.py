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
