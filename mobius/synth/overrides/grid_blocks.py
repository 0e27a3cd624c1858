"""Per-patch index arithmetic shared by the grid towers' overrides (PaddleOCR-VL, MuseGlimmer,
LFM3-VL, Kimi-K2.5, HunYuan-VL, HY-V4-VL): every index is computed for all patches at once from
``grid_thw``, so shapes follow the number of patches; the one count from the grid's values (rows
of merged tokens closed by a newline, :func:`interleaved`) is a single boolean selection
(``mobius.tasks.vlm_grid``)."""

from __future__ import annotations

from typing import Any

import torch

from mobius.tasks.vlm_grid import patch_of_image


def block_patches(grid_thw: torch.Tensor, patches: Any, m1: int, m2: int) -> torch.Tensor:
    """``[patches // (m1 * m2), m1 * m2]``: for each merged token (image, frame, block row, block
    column, in that order) the row-major indices of its ``m1 x m2`` patches, in (row, column)
    order."""
    unit = m1 * m2
    p = patch_of_image(grid_thw, patches // unit, unit)
    width = p["w"]
    blocks_w = width // m2
    frame = (p["h"] // m1) * blocks_w
    frame_index, k = p["local"] // frame, p["local"] % frame
    first = (
        p["start"] * unit
        + frame_index * p["h"] * width
        + (k // blocks_w) * m1 * width
        + (k % blocks_w) * m2
    )
    rows = torch.arange(m1, device=grid_thw.device).repeat_interleave(m2)
    cols = torch.arange(m2, device=grid_thw.device).repeat(m1)
    return first[:, None] + rows[None, :] * width[:, None] + cols[None, :]


def strided_conv(
    conv: torch.nn.Conv2d, patches: torch.Tensor, grid_thw: torch.Tensor, merge: int
) -> torch.Tensor:
    """``conv`` (kernel = stride = ``merge``, no padding) over each frame's row-major patch grid,
    as one gather of every merged token's block and one linear: ``[patches, channels]`` in,
    ``[patches / merge², out_channels]`` out, merged tokens row-major per frame."""
    index = block_patches(grid_thw, patches.shape[0], merge, merge)
    blocks = patches.index_select(0, index.reshape(-1)).reshape(index.shape[0], -1)
    # the kernel's (row, column, channel) order, the order the block's features sit in
    weight = conv.weight.permute(0, 2, 3, 1).reshape(conv.out_channels, -1)
    return torch.nn.functional.linear(blocks, weight, conv.bias)


def token_places(grid_thw: torch.Tensor, tokens: Any, merge: int) -> dict[str, torch.Tensor]:
    """For each merged token (row-major per frame): whether it opens its image (``first``), ends
    its row of merged tokens (``row_end``), ends its image (``last``)."""
    unit = merge * merge
    p = patch_of_image(grid_thw, tokens, unit)
    blocks_w = p["w"] // merge
    count = p["t"] * p["h"] * p["w"] // unit
    return {
        "first": p["local"] == 0,
        "row_end": p["local"] % blocks_w == blocks_w - 1,
        "last": p["local"] == count - 1,
    }


def interleaved(slots: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Per merged token, its slots in order (each ``([tokens, dim] values, [tokens] kept)``, a
    ``[dim]`` value broadcast), the kept ones only: one boolean selection, so the row count is
    the number kept (a count from the grid's values)."""
    tokens = slots[0][1].shape[0]
    values = torch.stack([v.expand(tokens, v.shape[-1]) for v, _ in slots], 1)
    kept = torch.stack([k for _, k in slots], 1)
    return values.reshape(-1, values.shape[-1])[kept.reshape(-1)]
