"""MuseGlimmer: the vision tower's pixel-shuffle order, computed per merged token."""

from __future__ import annotations

from typing import Any

import torch

from mobius.synth.overrides.grid_blocks import block_patches


def shuffle_index_per_token(module: torch.nn.Module) -> None:
    # MuseGlimmerVisionModel.pixel_shuffle reads get_vision_pixel_shuffle_index, which loops in
    # Python over grid_thw.tolist() building each image's block permutation: no loop traces for a
    # grid given as an input. HF lets the index be passed precomputed (kwargs
    # "pixel_shuffle_index"); it is the same permutation computed for every merged token at once
    # (its image, frame, block row and column found from the grid, then its m x m patches in
    # row, column order).
    original = module.pixel_shuffle

    def pixel_shuffle(hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any):
        if kwargs.get("pixel_shuffle_index") is None:
            merge = module.merge_size
            index = block_patches(grid_thw, hidden_states.shape[0], merge, merge)
            kwargs["pixel_shuffle_index"] = index.reshape(-1)
        return original(hidden_states, grid_thw, **kwargs)

    module.pixel_shuffle = pixel_shuffle
