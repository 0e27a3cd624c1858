"""HunYuan-VL and HY-V4-VL (one vision tower, two variants): the per-image position resize and
patch merger, computed per patch and per merged token.

Both towers loop in Python over the grid's values, which torch.export cannot trace for a grid
given as an input:

- the patch embedding resizes its square position table bilinearly to each image's ``(h, w)``
  (``for t, h, w in grid_thw``; HY-V4-VL with a scale factor ``(h + 0.1) / side``, which shifts
  the sampling grid). Here each patch reads the resized table at its own row and column
  (``grid_resize``), patches row-major per image as the processor lays them out;
- the tower splits the patches per image and runs the merger on each image's own ``(h, w)``
  grid: a strided convolution over ``merge x merge`` blocks, a 1x1 convolution, then a newline
  feature after each row of merged tokens (HunYuan-VL also projects to the text width and puts
  begin and end features around each image, then an RMS norm). Here the strided convolution is
  one gather and a linear (``grid_blocks.strided_conv``), and the newline, begin and end
  features are slots after or before each merged token kept by where the token sits in its
  image (``grid_blocks.interleaved``): each image gives ``(h/m)(w/m + 1)`` features, ``+ 2``
  for HunYuan-VL, in HF's order, a count from the grid's values (one boolean selection).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from mobius.synth.overrides.grid_blocks import interleaved, strided_conv, token_places
from mobius.synth.overrides.grid_resize import resized_at, row_major, size_scale
from mobius.tasks.vlm_grid import patch_of_image


def _shifted_scale(size: torch.Tensor, side: int) -> torch.Tensor:
    """HY-V4-VL's ``scale_factor = (size + 0.1) / side``: input rows per output row are its
    reciprocal, taken in float64 and rounded to float32 as PyTorch does; an axis whose output
    size is the table's side is copied as it is (PyTorch's kernel skips the scale there)."""
    scale = (1.0 / ((size.to(torch.float64) + 0.1) / side)).to(torch.float32)
    return torch.where(size == side, torch.ones_like(scale), scale)


def _positions(module: torch.nn.Module, scale: Callable[..., torch.Tensor]) -> None:
    if module.config.interpolate_mode != "bilinear":  # HF's loop stays (and refuses at the trace)
        return
    channels, patch = module.config.num_channels, module.patch_size

    def forward(pixel_values: torch.Tensor, grid_thw: Any) -> torch.Tensor:
        patches = pixel_values.shape[0]
        pixels = pixel_values.reshape(patches, channels, patch, patch)
        embeddings = module.patch_embedding(pixels.to(module.patch_embedding.weight.dtype))
        embeddings = embeddings.flatten(1)
        side = module.position_edge
        table = module.position_embedding.weight[1:].reshape(side, side, -1).float()
        p = patch_of_image(torch.as_tensor(grid_thw), patches)
        row, col = row_major(p)
        positions = resized_at(table, row, col, scale(p["h"], side), scale(p["w"], side))
        return (embeddings + positions.to(embeddings.dtype)).unsqueeze(0)

    module.forward = forward


def positions_per_patch(module: torch.nn.Module) -> None:
    """HunYuanVLVisionPatchEmbed: the table resized to ``size=(h, w)``, read per patch."""
    _positions(module, size_scale)


def shifted_positions_per_patch(module: torch.nn.Module) -> None:
    """HYV4VLVisionPatchEmbed: the table resized by ``scale_factor=((h + 0.1) / side, ...)``."""
    _positions(module, _shifted_scale)


def _pointwise(conv: torch.nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """A 1x1 convolution on ``[tokens, channels]``."""
    return torch.nn.functional.linear(x, conv.weight[:, :, 0, 0], conv.bias)


def _merged_tokens(merger: torch.nn.Module, patches: torch.Tensor, grid: torch.Tensor) -> Any:
    x = merger.before_rms(patches)
    x = strided_conv(merger.proj_conv, x, grid, merger.spatial_merge_size)
    x = _pointwise(merger.proj_out, merger.proj_act(x))
    return x, token_places(grid, x.shape[0], merger.spatial_merge_size)


def _hunyuan_merge(merger: torch.nn.Module, patches: torch.Tensor, grid: torch.Tensor) -> Any:
    """HunYuanVLVisionPatchMerger over every image: begin, each row's tokens and newline, end."""
    x, at = _merged_tokens(merger, patches, grid)
    newline = merger.mlp(merger.image_newline.to(x.dtype))
    every = torch.ones_like(at["first"])
    features = interleaved(
        [
            (merger.image_begin.to(x.dtype), at["first"]),
            (merger.mlp(x), every),
            (newline, at["row_end"]),
            (merger.image_end.to(x.dtype), at["last"]),
        ]
    )
    return merger.after_rms(features)


def _hy_v4_merge(merger: torch.nn.Module, patches: torch.Tensor, grid: torch.Tensor) -> Any:
    """HYV4VLVisionPatchMerger over every image: each row's tokens and newline."""
    x, at = _merged_tokens(merger, patches, grid)
    every = torch.ones_like(at["first"])
    return interleaved([(x, every), (merger.image_newline.to(x.dtype), at["row_end"])])


def _tower(module: torch.nn.Module, merge: Callable[..., torch.Tensor]) -> None:
    family = sys.modules[type(module).__module__]

    def forward(pixel_values: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any) -> Any:
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        for key in ("return_dict", "output_hidden_states", "output_attentions"):
            kwargs.pop(key, None)
        hidden = module.embeddings(pixel_values, grid_thw)
        cu_seqlens, max_seqlen = family.get_vision_attention_seqlens(
            grid_thw, module.config, kwargs=kwargs
        )
        for layer in module.layers:
            hidden = layer(
                hidden, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, attention_mask=None, **kwargs
            )
        features = merge(module.patch_merger, hidden[0], grid_thw)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=features[None])

    module.forward = forward


def merged_per_token(module: torch.nn.Module) -> None:
    """HunYuanVLVisionTransformer: every image merged at once (see the module docstring)."""
    _tower(module, _hunyuan_merge)


def newline_rows_per_token(module: torch.nn.Module) -> None:
    """HYV4VLVisionModel: every image merged at once (see the module docstring)."""
    _tower(module, _hy_v4_merge)
