"""VideoLLaMA3: images at merge size 1, the image processor's, with no per-image loop."""

from __future__ import annotations

from typing import Any

import torch

_UNIT = "_mobius_unit_merge_sizes"


def images_unmerged(module: torch.nn.Module) -> None:
    # VideoLlama3Model.get_image_features takes image_merge_sizes, one per image, and the tower's
    # pixel_unshuffle loops in Python over the images, reshaping each by its merge size and
    # resizing it bilinearly to (h / m, w / m): per-image sizes from tensor values, which
    # torch.export cannot trace, and a feature count that depends on them. VideoLLaMA3's image
    # processor merges images at size 1 always (its class attribute; videos at 2), and at size 1
    # HF's reshape, permute and same-size resize return each image's patches unchanged. So the
    # vision graph takes pixel_values and image_grid_thw only and calls the tower with merge
    # sizes of 1, and pixel_unshuffle returns its input for exactly those sizes (any other call,
    # a video's, runs HF's loop).
    tower = module.vision_model
    original_features = module.get_image_features
    original_unshuffle = tower.pixel_unshuffle

    def get_image_features(
        pixel_values: torch.Tensor,
        image_grid_thw: torch.Tensor,
        image_merge_sizes: torch.Tensor | None = None,
        **kwargs: Any,
    ):
        if image_merge_sizes is None:
            image_merge_sizes = torch.ones_like(image_grid_thw[:, 0])
            setattr(tower, _UNIT, image_merge_sizes)
        try:
            return original_features(pixel_values, image_grid_thw, image_merge_sizes, **kwargs)
        finally:
            if hasattr(tower, _UNIT):
                delattr(tower, _UNIT)

    def pixel_unshuffle(hidden_states, grid_thw, merge_sizes):
        if merge_sizes is getattr(tower, _UNIT, None):
            return hidden_states
        return original_unshuffle(hidden_states, grid_thw, merge_sizes)

    module.get_image_features = get_image_features
    tower.pixel_unshuffle = pixel_unshuffle
