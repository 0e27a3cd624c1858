"""Unlimited-OCR: the global views' features for every image at once."""

from __future__ import annotations

from typing import Any

import torch


def global_views_batched(module: torch.nn.Module) -> None:
    # UnlimitedOcrModel.get_image_features lays each image's features out in a Python loop over
    # the images (range(pixel_values.shape[0])), which fixes the number of images in the trace.
    # Without local crops (pixel_values_local, optional: the processor's crop mode for large
    # images) each image's layout is the same: its q x q grid of projected global features with
    # the learned newline after each row, then the view separator. The same rows for every
    # image at once, by reshapes. Local crops are not taken (the vision graph has no input for
    # them), so the graph's images are the processor's global views alone.
    original = module.get_image_features

    def get_image_features(pixel_values: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs.get("pixel_values_local") is not None:
            return original(pixel_values, *args, **kwargs)
        kwargs.pop("pixel_values_local", None)
        kwargs.pop("num_local_patches", None)
        kwargs.pop("patches_grid", None)
        return_dict = kwargs.pop("return_dict", True)
        outputs = module.vision_tower(pixel_values, **kwargs)
        features = module.multi_modal_projector(outputs.last_hidden_state)
        images, tokens, hidden = features.shape
        side = int(tokens**0.5)
        grid = features.reshape(images, side, side, hidden)
        newline = module.image_newline.to(features.dtype).expand(images, side, 1, hidden)
        rows = torch.cat([grid, newline], dim=2).reshape(images, -1, hidden)
        separator = module.view_separator.to(features.dtype).expand(images, 1, hidden)
        pooled = torch.cat([rows, separator], dim=1).reshape(-1, hidden)
        outputs.pooler_output = pooled
        return outputs if return_dict else (outputs.last_hidden_state, pooled)

    module.get_image_features = get_image_features
