"""A learned square position table resized to each image's patch grid, evaluated per patch
(HunYuan-VL, HY-V4-VL, Cosmos 3 Edge).

Their towers call ``F.interpolate(table, size=(h, w), mode="bilinear", align_corners=False)`` once
per image in a Python loop over the grid's values, which torch.export cannot trace for a grid given
as an input. Each output row of that resize is a weighted sum of table rows whose weights depend
only on the output index and the output size, so the same values are computed for every patch at
once from its image's ``(h, w)`` and its own ``(row, column)``, with PyTorch's formulas:

- plain bilinear: source ``scale * (i + 0.5) - 0.5`` clamped at 0 (``scale`` the input size over
  the output size, or the reciprocal of a given scale factor), two taps ``floor`` and the next
  (the last row repeated at the far edge);
- antialiased bilinear: a triangle filter stretched by ``scale`` when shrinking, centred at
  ``scale * (i + 0.5)``, over the table rows it reaches, normalised to sum 1. Every table row
  gets a weight (zero outside the filter), so the tap count is the table's side, a shape.
"""

from __future__ import annotations

from typing import Any

import torch


def _source(index: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return scale * (index.to(torch.float32) + 0.5)


def bilinear_taps(
    index: torch.Tensor, scale: torch.Tensor, side: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([n, 2] table rows, [n, 2] weights)`` of output rows ``index`` (``align_corners=False``,
    no antialias); ``scale``: input rows per output row, per entry (float32)."""
    source = torch.clamp(_source(index, scale) - 0.5, min=0.0)
    low = torch.clamp(torch.floor(source), max=side - 1)
    upper = torch.clamp(source - low, 0.0, 1.0)
    low = low.to(torch.int64)
    high = low + (low < side - 1).to(torch.int64)
    return torch.stack([low, high], -1), torch.stack([1.0 - upper, upper], -1)


def antialias_weights(index: torch.Tensor, scale: torch.Tensor, side: int) -> torch.Tensor:
    """``[n, side]``: each output row's weight on every table row (bilinear, ``antialias=True``,
    ``align_corners=False``)."""
    shrinking = scale >= 1.0
    support = torch.where(shrinking, scale, torch.ones_like(scale))
    inverse = torch.where(shrinking, 1.0 / scale, torch.ones_like(scale))
    center = _source(index, scale)
    first = torch.clamp(torch.trunc(center - support + 0.5), min=0.0)
    end = torch.clamp(torch.trunc(center + support + 0.5), max=float(side))
    rows = torch.arange(side, device=index.device, dtype=torch.float32)[None, :]
    weight = torch.clamp(1.0 - ((rows - center[:, None] + 0.5) * inverse[:, None]).abs(), min=0.0)
    weight = weight * ((rows >= first[:, None]) & (rows < end[:, None])).to(weight.dtype)
    return weight / weight.sum(-1, keepdim=True)


def size_scale(size: torch.Tensor, side: int) -> torch.Tensor:
    """Input rows per output row for an output of ``size`` rows (``F.interpolate(size=...)``)."""
    return side / size.to(torch.float32)


def resized_at(
    table: torch.Tensor,
    row: torch.Tensor,
    col: torch.Tensor,
    scale_h: torch.Tensor,
    scale_w: torch.Tensor,
    antialias: bool = False,
) -> torch.Tensor:
    """``[n, dim]``: the square ``table`` ``[side, side, dim]`` resized bilinearly, read at each
    entry's ``(row, col)``, with each entry's own scales."""
    side, dim = table.shape[0], table.shape[-1]
    if antialias:
        weight_h = antialias_weights(row, scale_h, side)
        weight_w = antialias_weights(col, scale_w, side)
        across = torch.einsum("nb,abd->nad", weight_w, table)
        return torch.einsum("na,nad->nd", weight_h, across)
    taps_h, weight_h = bilinear_taps(row, scale_h, side)
    taps_w, weight_w = bilinear_taps(col, scale_w, side)
    index = (taps_h[:, :, None] * side + taps_w[:, None, :]).reshape(-1, 4)
    weight = (weight_h[:, :, None] * weight_w[:, None, :]).reshape(-1, 4, 1)
    rows = table.reshape(side * side, dim).index_select(0, index.reshape(-1))
    return (rows.reshape(-1, 4, dim) * weight.to(table.dtype)).sum(1)


def row_major(p: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each patch's (row, column) within its frame, patches row-major per frame
    (``vlm_grid.patch_of_image``'s fields)."""
    in_frame = p["local"] % (p["h"] * p["w"])
    return in_frame // p["w"], in_frame % p["w"]
