"""LFM3-VL: the vision tower's depthwise convolution over each frame's patch grid, per patch."""

from __future__ import annotations

from typing import Any

import torch

from mobius.synth.overrides.grid_blocks import patch_of_image
from mobius.tasks.vlm_grid import _merge_order

_GRID = "_mobius_grid_thw"


def conv_by_neighbours(module: torch.nn.Module) -> None:
    # Lfm3VlVisionModel hands its short-convolution layers grid_thw.tolist(), and each layer
    # splits the patches per image and frame in Python, rasters every frame to its (h, w) grid,
    # runs the depthwise Conv2d and goes back to merge-block order: sizes from the grid's values,
    # which torch.export cannot trace for a grid given as an input. The same convolution per
    # patch: for each kernel tap the neighbouring patch (row + dy - k//2, col + dx - k//2) is
    # found in merge-block order from the grid, gathered, zeroed outside its frame (the zero
    # padding of the Conv2d) and weighted by the tap's per-channel weight. The tower's forward
    # keeps the grid tensor on its convolution layers for the call.
    convs = [m for m in module.modules() if type(m).__name__ == "Lfm3VlVisionShortConv"]
    original = module.forward

    def forward(pixel_values: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any):
        for conv in convs:
            setattr(conv, _GRID, grid_thw)
        try:
            return original(pixel_values, grid_thw, **kwargs)
        finally:
            for conv in convs:
                delattr(conv, _GRID)

    module.forward = forward
    for conv in convs:
        conv.forward = _short_conv(conv)


def _short_conv(conv: torch.nn.Module) -> Any:
    def forward(hidden_states: torch.Tensor, grid_thw: Any = None, **kwargs: Any) -> torch.Tensor:
        input_gate, output_gate, conv_input = conv.in_proj(hidden_states).chunk(3, dim=-1)
        gated = input_gate * conv_input
        mixed = _depthwise(conv.spatial_conv, gated, getattr(conv, _GRID), conv.spatial_merge_size)
        return conv.out_proj(output_gate * mixed)

    return forward


def _depthwise(
    spatial: torch.nn.Conv2d, patches: torch.Tensor, grid_thw: torch.Tensor, merge: int
) -> torch.Tensor:
    """``spatial`` (depthwise, zero padding k // 2) over each frame of patches in merge-block
    order; ``[patches, channels]`` in and out."""
    p = patch_of_image(grid_thw, patches.shape[0])
    height, width = p["h"], p["w"]
    frame_size = height * width
    frame_start = p["start"] + (p["local"] // frame_size) * frame_size
    row, col = _merge_order(p["local"] % frame_size, width, merge)
    blocks_w = width // merge
    kernel_h, kernel_w = spatial.weight.shape[-2:]
    pad_h, pad_w = spatial.padding
    out = torch.zeros_like(patches)
    for dy in range(kernel_h):
        for dx in range(kernel_w):
            r, c = row + dy - pad_h, col + dx - pad_w
            inside = (r >= 0) & (r < height) & (c >= 0) & (c < width)
            r = torch.minimum(r.clamp(min=0), height - 1)
            c = torch.minimum(c.clamp(min=0), width - 1)
            block = (r // merge) * blocks_w + c // merge
            index = frame_start + (block * merge + r % merge) * merge + c % merge
            taken = patches.index_select(0, index) * inside[:, None].to(patches.dtype)
            out = out + taken * spatial.weight[:, 0, dy, dx]
    if spatial.bias is not None:
        out = out + spatial.bias
    return out
