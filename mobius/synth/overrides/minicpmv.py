"""MiniCPM-V 4.6/4.7 and MiniCPM-OCR: the per-image merges computed per token.

Their vision graph takes every image's patches packed in one row and each image's size in
patches (``target_sizes``, ``vlm_inputs.packed_inputs``). Two modules read the sizes' values as
Python numbers, which a trace cannot follow for a dynamic number of images:

- the projector (``...Merger``) loops over the images and ``view``\\ s each one's features by its
  ``(height, width)`` to gather ``merge_kernel_size`` blocks. Here every output token finds its
  image by comparing its index with the images' cumulative token counts, and gathers its block's
  rows by index: the same rows in the same order, for all images at once;
- the tower's window-attention merger (``...ViTWindowAttentionMerger``) checks that the window
  boundaries number one per window. The per-patch window order of ``vlm_grid`` gives a boundary
  per patch (repeats allowed); transformers requires every image's sides to be multiples of the
  window, so every window is full and the boundaries are ``0, window, 2 * window, ...``.
"""

from __future__ import annotations

from typing import Any

import torch

from mobius.tasks.vlm_grid import patch_of_image


def _gather_blocks(hidden: torch.Tensor, sizes: torch.Tensor, merge: tuple[int, int]) -> Any:
    """``hidden`` ``[tokens, dim]`` (images one after another, each ``h`` x ``w`` row-major) as
    ``[tokens / (mh * mw), mh * mw * dim]``: each ``mh`` x ``mw`` block's rows side by side, blocks
    row-major per image (transformers' ``view(...).permute(0, 2, 1, 3, 4)``)."""
    mh, mw = merge
    grid = torch.nn.functional.pad(sizes.to(torch.int64), (1, 0), value=1)
    p = patch_of_image(grid, hidden.shape[0] // (mh * mw), mh * mw)
    blocks_w = p["w"] // mw
    block_row, block_col = p["local"] // blocks_w, p["local"] % blocks_w
    image_start = p["start"] * (mh * mw)
    rows = torch.arange(mh, device=hidden.device)[:, None]
    cols = torch.arange(mw, device=hidden.device)[None, :]
    index = (
        image_start[:, None, None]
        + (block_row[:, None, None] * mh + rows) * p["w"][:, None, None]
        + block_col[:, None, None] * mw
        + cols
    )
    return hidden[index.reshape(-1)].reshape(-1, mh * mw * hidden.shape[-1])


def merged_per_token(module: torch.nn.Module) -> None:
    """The projector's per-image loop as one gather per merge round (see the module docstring);
    returns one entry holding every image's features, in order."""
    merge = tuple(module.merge_kernel_size)

    def forward(hidden_states: torch.Tensor, target_sizes: torch.Tensor) -> list[torch.Tensor]:
        sizes = target_sizes.to(torch.int64)
        hidden = _gather_blocks(hidden_states[0], sizes, merge)
        hidden = module.mlp[0](hidden)
        for i in range(1, module.merger_times):
            sizes = torch.stack([sizes[:, 0] // merge[0], sizes[:, 1] // merge[1]], dim=-1)
            hidden = module.mlp[i](_gather_blocks(hidden, sizes, merge))
        return [hidden]

    module.forward = forward


def full_windows(module: torch.nn.Module) -> None:
    """Window boundaries one per (full) window, the count the merger checks."""
    original = module.get_window_index

    def get_window_index(target_sizes: torch.Tensor, kwargs: Any = None) -> Any:
        index, _, size = original(target_sizes, kwargs=kwargs)
        windows = torch.arange(index.shape[0] // size + 1, device=index.device)
        return index, (windows * size).to(torch.int32), size

    module.get_window_index = get_window_index
