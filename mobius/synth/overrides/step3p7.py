"""Step3p7: the vision tower's patch positions from the image's shape; the global views'
features for every image at once."""

from __future__ import annotations

import sys
from typing import Any

import torch


def positions_from_shape(module: torch.nn.Module) -> None:
    # Step3p7VisionModel writes its (1, rows, columns) patch grid into a new tensor in forward
    # and vision_utils.get_vision_position_ids reads it back with tolist(): on the meta device
    # mobius traces on, that tensor has no values. The grid is the image's own size (static in
    # the vision graph), merged by 1: each patch's (row, column) in row-major order, the same
    # positions from the shape. The tower's forward uses them for the call.
    family = sys.modules[type(module).__module__]
    original = module.forward

    def forward(pixel_values: torch.Tensor, **kwargs: Any) -> Any:
        patch = module.embeddings.patch_size
        rows, columns = pixel_values.shape[-2] // patch, pixel_values.shape[-1] // patch
        index = torch.arange(rows * columns, device=pixel_values.device)
        positions = torch.stack([index // columns, index % columns], dim=-1)
        own = family.get_vision_position_ids
        family.get_vision_position_ids = lambda *args, **kw: positions
        try:
            return original(pixel_values, **kwargs)
        finally:
            family.get_vision_position_ids = own

    module.forward = forward


def global_views_batched(module: torch.nn.Module) -> None:
    # Step3p7Model.get_image_features lays each image's features out in a Python loop over the
    # images (its local crops first, if any), which fixes the number of images in the trace.
    # Without local crops (pixel_values_local, optional) each image's features are its global
    # view's rows: the same rows for every image at once. Local crops are not taken (the vision
    # graph has no input for them).
    original = module.get_image_features

    def get_image_features(pixel_values: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs.get("pixel_values_local") is not None:
            return original(pixel_values, *args, **kwargs)
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        for name in ("pixel_values_local", "num_local_patches", "return_dict"):
            kwargs.pop(name, None)
        vision = module.vision_model(pixel_values, **kwargs)
        features = module.multi_modal_projector(vision.last_hidden_state)
        return BaseModelOutputWithPooling(
            last_hidden_state=vision.last_hidden_state,
            pooler_output=features.reshape(-1, features.shape[-1]),
        )

    module.get_image_features = get_image_features
