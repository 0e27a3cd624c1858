"""Per-patch index arithmetic shared by the grid towers' overrides (PaddleOCR-VL, MuseGlimmer,
LFM3-VL, Kimi-K2.5): every index is computed for all patches at once from ``grid_thw``, so
shapes follow the number of patches and nothing depends on the grid's values
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
