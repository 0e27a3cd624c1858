"""Kimi-K2.5: the vision tower's frame index and temporal merge, computed per patch."""

from __future__ import annotations

import sys
from typing import Any

import torch

from mobius.synth.overrides.grid_blocks import patch_of_image


def frame_index_per_patch(module: torch.nn.Module) -> None:
    # Kimi_K25VisionPositionEmbeddings reads get_vision_frame_index, which loops in Python over
    # grid_thw.tolist(): no loop traces for a grid given as an input. HF lets the index be passed
    # precomputed (kwargs "frame_index"); it is computed here per patch from the grid: 0 for a
    # single-frame item (an image), frame + 1 within a multi-frame one, as HF's loop gives. The
    # interpolation taps are summed as a gather and a weighted sum, which is what HF's
    # F.embedding_bag(mode="sum", per_sample_weights=...) computes (no ONNX lowering of its own).
    family = sys.modules[type(module).__module__]

    def forward(hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any):
        table = module.position_embeddings.flatten(0, 1)
        indices, weights = family.get_vision_interpolation_indices_and_weights(
            grid_thw,
            module.num_grid_per_side,
            mode=module.interpolation_mode,
            align_corners=module.interpolation_align_corners,
            kwargs=kwargs,
        )
        pos = (table[indices] * weights.to(table.dtype)[..., None]).sum(1)
        frame_index = kwargs.get("frame_index")
        if frame_index is None:
            p = patch_of_image(grid_thw, hidden_states.shape[0])
            frame = p["local"] // (p["h"] * p["w"])
            frame_index = torch.where(p["t"] > 1, frame + 1, torch.zeros_like(frame))
        pos = pos + module.time_position_embeddings[frame_index]
        return hidden_states + pos.to(hidden_states.dtype)

    module.forward = forward


def merge_index_per_patch(module: torch.nn.Module) -> None:
    # Kimi_K25VisionModel.temporal_merge reads get_vision_temporal_merge_index, which is vectorised
    # but sizes its outputs with int(sum(...)) of the grid's values (a host sync torch.export
    # cannot trace). HF lets the triple be passed precomputed (kwargs "temporal_merge_index"): it
    # is computed here with HF's formula, each patch's item found from the grid, and the number of
    # merged tokens taken from the number of patches: patches / kernel, exact for images
    # (one frame each, the image-text-to-text contract); a video's frames would be counted apart.
    original = module.temporal_merge

    def temporal_merge(hidden_states, grid_thw, kernel_height, kernel_width, kwargs=None):
        kwargs = dict(kwargs or {})
        if kwargs.get("temporal_merge_index") is None:
            kwargs["temporal_merge_index"] = _merge_index(
                grid_thw, hidden_states.shape[0], kernel_height, kernel_width
            )
        return original(hidden_states, grid_thw, kernel_height, kernel_width, kwargs=kwargs)

    module.temporal_merge = temporal_merge


def _merge_index(
    grid_thw: torch.Tensor, patches: Any, kernel_height: int, kernel_width: int
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    kernel = kernel_height * kernel_width
    p = patch_of_image(grid_thw, patches)
    merged_w = grid_thw[:, 2] // kernel_width
    merged = (grid_thw[:, 1] // kernel_height) * merged_w
    merged_start = (merged.cumsum(0) - merged).index_select(0, p["image"])
    in_frame = p["local"] % (p["h"] * p["w"])
    row, col = in_frame // p["w"], in_frame % p["w"]
    merged_index = (row // kernel_height) * merged_w.index_select(0, p["image"]) + (
        col // kernel_width
    )
    in_kernel = (row % kernel_height) * kernel_width + (col % kernel_width)
    destination = (merged_start + merged_index) * kernel + in_kernel
    weight = 1.0 / p["t"].to(torch.float32)
    return destination, weight, patches // kernel
