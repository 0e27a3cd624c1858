"""The decoder's ``position_ids`` for HunYuan-VL's rotary (its ``get_rope_index``), from the
prompt's ids, its mask and each image's ``image_grid_thw``: the recipe ``runtime.vlm`` runs where
``mobius.json`` says ``"position_recipe": "image-index"``.

Every real token of a row first gets its index among the row's real tokens on every axis (three,
or four with a sequence axis first: ``mobius.json``'s ``position_axes``). An image's run of image
tokens holds its merged grid, ``rows x (columns + 1)`` (a newline feature ends each row), between
a begin and an end feature; the grid's tokens then take ``(column, row, image)`` on the last three
axes, where ``image`` counts the images of the whole batch from 0, in order. Text positions are
not shifted by images. Pads get 0.
"""

from __future__ import annotations

import numpy as np

from mobius.runtime.token_runs import runs


def image_index_positions(
    ids: np.ndarray,
    mask: np.ndarray,
    image_grid_thw: np.ndarray | None,
    image_token_id: int,
    spatial_merge_size: int,
    axes: int = 3,
) -> np.ndarray:
    """``[axes, batch, sequence]`` positions (see the module docstring)."""
    ids, mask = np.asarray(ids), np.asarray(mask).astype(bool)
    out = np.zeros((axes, *ids.shape), dtype=np.int64)
    grids = iter(np.asarray(image_grid_thw).tolist() if image_grid_thw is not None else [])
    image = 0
    for b in range(ids.shape[0]):
        real = np.flatnonzero(mask[b])
        is_image = ids[b, real] == image_token_id
        rows = np.tile(np.arange(len(real), dtype=np.int64), (axes, 1))
        for i, end in runs(is_image):
            _, h, w = next(grids)
            h, w = h // spatial_merge_size, w // spatial_merge_size
            grid = h * (w + 1)
            if end - i not in (grid, grid + 2):
                raise ValueError(
                    f"runtime.image_index: an image run of {end - i} tokens for a merged grid of "
                    f"{h} x {w} (expected {grid + 2}, or {grid} without begin and end)"
                )
            start = i + (end - i - grid) // 2
            row, column = np.meshgrid(np.arange(h), np.arange(w + 1), indexing="ij")
            rows[-3:, start : start + grid] = [column.ravel(), row.ravel(), np.full(grid, image)]
            image += 1
        out[:, b, real] = rows
    return out
