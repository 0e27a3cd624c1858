"""Cosmos 3 Edge: the vision embeddings' per-image position resize, computed per patch."""

from __future__ import annotations

from typing import Any

import torch

from mobius.synth.overrides.grid_resize import resized_at, size_scale
from mobius.tasks.vlm_grid import _merge_order, patch_of_image


def positions_per_patch(module: torch.nn.Module) -> None:
    # Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings loops in Python over
    # grid_thw.tolist(), resizing the square position table to each image's (h, w) (bilinear,
    # antialiased) and reordering it to the processor's merge-block order: no loop traces for a
    # grid given as an input (the trace's list is empty, hence "cat expects at least one
    # tensor"). The same values per patch: each patch's (row, column) found from its index in
    # merge-block order (vlm_grid), the antialiased resize evaluated there (grid_resize).
    merge = module.config.spatial_merge_size

    def forward(pixel_values: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any):
        weight = module.patch_embedding.weight
        patch_embeds = module.patch_embedding(pixel_values.to(dtype=weight.dtype))
        side = module.position_embedding_size
        table = module.position_embedding.weight.reshape(side, side, -1)
        p = patch_of_image(grid_thw, pixel_values.shape[0])
        row, col = _merge_order(p["local"] % (p["h"] * p["w"]), p["w"], merge)
        positions = resized_at(
            table.float(),
            row,
            col,
            size_scale(p["h"], side),
            size_scale(p["w"], side),
            antialias=True,
        )
        return patch_embeds + positions.to(table.dtype)

    module.forward = forward
