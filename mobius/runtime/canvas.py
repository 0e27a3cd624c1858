"""The decoder's ``position_ids`` for MiniCPM-V 4.7's canvas rotary (its ``get_rope_index``),
from the prompt's ids, its mask and each image's ``target_sizes``: the recipe ``runtime.vlm``
runs where ``mobius.json`` says ``"position_recipe": "canvas"``.

Each image is a frame: an opening marker (``<image>``), its thumbnail's image tokens, and the
closing markers. Over each row's real tokens, text counts on from the last position on all
three axes. A frame starts its canvas at ``origin``, the next text position: the opening marker
gets ``(origin, origin - 1, origin - 1)`` (just outside the canvas), the thumbnail's tokens
``(origin, origin + row, origin + column)`` over its grid of merged patches (``target_sizes //
merge_factor``), the first closing marker ``(origin, origin + rows, origin + columns)`` (the far
corner), any other closing marker ``origin`` on all axes; text then goes on from
``origin + max(rows, columns) + 1``. Frames separated by markers only share one group, the
tokens between them (none in the processor's layout) counting on as text plus one.

Only thumbnails: a prompt with detail slices (``<slice>`` before an image run) is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius.runtime.token_runs import runs


def _frames(ids: list[int], is_image: list[bool], markers: set[int], slice_start: Any) -> list:
    """The image runs as frames ``(open, start, end, close_end, joined)``: the opening marker's
    index, the thumbnail's span, one past its closing markers, and whether only markers separate
    it from the frame before (one group)."""
    frames: list[tuple[int, int, int, int, bool]] = []
    previous_end = 0
    for start, i in runs(is_image):
        if frames and start > 0 and ids[start - 1] == slice_start:
            raise ValueError(
                "runtime.vlm: a MiniCPM-V slice layout (<slice> crops) is not computed yet; "
                "pass the thumbnail alone"
            )
        joined = bool(frames) and all(t in markers for t in ids[previous_end : start - 1])
        close_end = i
        while close_end < len(ids) and ids[close_end] in markers:
            close_end += 1
        frames.append((start - 1, start, i, close_end, joined))
        previous_end = i
    return frames


def _row(ids: list[int], is_image: list[bool], sizes: Any, spec: dict[str, Any]) -> np.ndarray:
    """One row's ``[3, real tokens]`` positions."""
    markers = {m for m in spec["markers"].values() if m is not None}
    merge = spec["merge_factor"]
    out = np.zeros((3, len(ids)), dtype=np.int64)
    current, cursor = 0, 0  # the next text position; the first index not yet placed
    for open_at, start, end, close_end, joined in _frames(
        ids, is_image, markers, spec["markers"].get("slice_start_id")
    ):
        gap = max(open_at - cursor, 0)
        out[:, cursor : cursor + gap] = np.arange(gap) + current
        current += gap + (1 if joined and gap else 0)
        rows, columns = (int(v) // merge for v in next(sizes))
        origin = current
        out[:, open_at:close_end] = origin
        out[1:, open_at] = max(origin - 1, 0)
        if end < close_end:
            out[1, end], out[2, end] = origin + rows, origin + columns
        grid_rows, grid_columns = np.meshgrid(np.arange(rows), np.arange(columns), indexing="ij")
        out[1, start:end] = origin + grid_rows.ravel()
        out[2, start:end] = origin + grid_columns.ravel()
        current, cursor = origin + max(rows, columns) + 1, close_end
    out[:, cursor:] = np.arange(len(ids) - cursor) + current
    return out


def canvas_positions(
    ids: np.ndarray, mask: np.ndarray, target_sizes: np.ndarray, spec: dict[str, Any]
) -> np.ndarray:
    """``position_ids`` ``[3, batch, sequence]`` (module docstring); ``spec``: ``mobius.json``'s
    ``canvas`` (``image_token_id``, ``merge_factor``, ``markers``). Pads get 0."""
    ids, mask = np.asarray(ids), np.asarray(mask).astype(bool)
    out = np.zeros((3, *ids.shape), dtype=np.int64)
    sizes = iter(np.asarray(target_sizes).tolist() if target_sizes is not None else [])
    for b in range(ids.shape[0]):
        real = ids[b, mask[b]].tolist()
        is_image = [t == spec["image_token_id"] for t in real]
        out[:, b, mask[b]] = _row(real, is_image, sizes, spec)
    return out
