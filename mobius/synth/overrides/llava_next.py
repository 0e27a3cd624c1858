"""LLaVA-NeXT (and -Video): any number of images of any sizes, with the anyres tiling per feature.

HF's ``get_image_features`` takes the processor's tiles (``pixel_values`` ``[num_images, tiles,
channels, tile, tile]``: the whole image resized to one tile, then the tiles of its best
resolution, padded to the batch's most) and ``image_sizes``, and loops over the images in Python:
each image's best resolution among ``image_grid_pinpoints`` (``select_best_resolution``) says its
tile count and grid, the grid's features are unpadded to the image's aspect ratio and closed by
``image_newline`` per row. All of it follows the sizes' values, which a trace cannot.

The override computes every image at once: the tower and projector over all tiles, each image's
best resolution as an ``argmax`` over the pinpoints (HF's first best: most effective pixels, then
least waste), and a canvas as large as the largest pinpoint's grid plus a newline column. A canvas
cell reads its tile's feature by one gather (tile ``1 + row // side * columns + column // side``);
the cells inside the image's unpadded rectangle, and the newline column just after it, are kept:
image after image, the whole-image tile's features first, then the canvas row-major, HF's order.
That selection is the one data-dependent count (an unbacked size).

Checked eagerly against HF's loop on two images of different sizes (tests/mobius/synth).
"""

from __future__ import annotations

from typing import Any

import torch


def best_resolution(image_sizes: torch.Tensor, pinpoints: list) -> torch.Tensor:
    """Each image's ``select_best_resolution`` ``[num_images, 2]`` (height, width), in float64
    as HF's Python floats."""
    pins = torch.tensor(pinpoints, dtype=torch.float64, device=image_sizes.device)
    sizes = image_sizes.to(torch.float64)
    height, width = sizes[:, :1], sizes[:, 1:]
    pin_h, pin_w = pins[None, :, 0], pins[None, :, 1]
    scale = torch.minimum(pin_w / width, pin_h / height)
    shown = torch.floor(width * scale) * torch.floor(height * scale)
    effective = torch.minimum(shown, width * height)
    wasted = pin_h * pin_w - effective
    # the first pinpoint with the most effective pixels, then the least waste (exact in float64)
    most = max(float(h) * float(w) for h, w in pinpoints) + 1
    key = effective * most - wasted
    return pins[key.argmax(-1)]


def unpadded_box(
    image_sizes: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """``unpad_image``'s kept rectangle ``(top, bottom, left, right)`` of a ``rows x columns``
    grid of features for images of ``image_sizes`` (their aspect ratio, padding split evenly)."""
    sizes = image_sizes.to(torch.float64)
    height, width = sizes[:, 0], sizes[:, 1]
    wide = width / height > columns.to(torch.float64) / rows.to(torch.float64)

    def kept(original: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        # int(round(original * scale, 7))
        return torch.floor(torch.round(original * scale * 1e7) / 1e7).to(torch.int64)

    pad_rows = (rows - kept(height, columns / width)) // 2
    pad_columns = (columns - kept(width, rows / height)) // 2
    zero = torch.zeros_like(rows)
    top = torch.where(wide, pad_rows, zero)
    bottom = torch.where(wide, rows - pad_rows, rows)
    left = torch.where(wide, zero, pad_columns)
    right = torch.where(wide, columns, columns - pad_columns)
    return top, bottom, left, right


def packed_tiles(
    tiles: torch.Tensor, image_sizes: torch.Tensor, config: Any, newline: torch.Tensor | None
) -> torch.Tensor:
    """``pack_image_features`` for every image at once: ``tiles`` ``[num_images, tiles,
    side * side, hidden]`` (projected), the rows of every image in order ``[rows, hidden]``."""
    images, count, per_tile, hidden = tiles.shape
    tile = config.vision_config.image_size
    side = tile // config.vision_config.patch_size
    best = best_resolution(image_sizes, config.image_grid_pinpoints).to(torch.int64)
    grid_rows, grid_columns = best[:, 0] // tile, best[:, 1] // tile
    top, bottom, left, right = unpadded_box(image_sizes, grid_rows * side, grid_columns * side)
    most_rows = max(int(h) // tile for h, _ in config.image_grid_pinpoints) * side
    most_columns = max(int(w) // tile for _, w in config.image_grid_pinpoints) * side
    device = tiles.device
    y = torch.arange(most_rows, device=device)[None, :, None]
    x = torch.arange(most_columns + 1, device=device)[None, None, :]
    inside = (y >= top[:, None, None]) & (y < bottom[:, None, None])
    inside = inside & (x >= left[:, None, None]) & (x <= right[:, None, None])
    is_newline = x == right[:, None, None]
    which = 1 + (y // side) * grid_columns[:, None, None] + x // side
    which = torch.clamp(which, max=count - 1)
    index = which * per_tile + (y % side) * side + (x % side)
    cells = index.reshape(images, -1)
    flat = tiles.reshape(images, count * per_tile, hidden)
    canvas = torch.gather(flat, 1, cells[..., None].expand(-1, -1, hidden))
    newline_cells = is_newline.expand_as(inside).reshape(images, -1, 1)
    if newline is None:
        inside = inside & ~is_newline
    else:
        canvas = torch.where(newline_cells, newline.to(canvas.dtype), canvas)
    rows = torch.cat([tiles[:, 0], canvas], dim=1)
    kept = torch.cat(
        [
            torch.ones((images, per_tile), dtype=torch.bool, device=device),
            inside.reshape(images, -1),
        ],
        dim=1,
    )
    return rows[kept]


def tiles_per_feature(module: torch.nn.Module) -> None:
    # LlavaNextModel / LlavaNextVideoModel: see the module docstring
    config = module.config

    def get_image_features(
        pixel_values: torch.Tensor,
        image_sizes: torch.Tensor,
        vision_feature_layer: Any = None,
        vision_feature_select_strategy: str | None = None,
        **kwargs: Any,
    ) -> Any:
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        layer = (
            config.vision_feature_layer if vision_feature_layer is None else vision_feature_layer
        )
        strategy = vision_feature_select_strategy or config.vision_feature_select_strategy
        images, count = pixel_values.shape[:2]
        out = module.vision_tower(
            pixel_values.flatten(0, 1), output_hidden_states=True, return_dict=True
        )
        if isinstance(layer, int):
            chosen = out.hidden_states[layer]
        else:
            chosen = torch.cat([out.hidden_states[i] for i in layer], dim=-1)
        if strategy == "default":
            chosen = chosen[:, 1:]
        projected = module.multi_modal_projector(chosen)
        tiles = projected.reshape(images, count, *projected.shape[1:])
        features = packed_tiles(tiles, torch.as_tensor(image_sizes), config, module.image_newline)
        return BaseModelOutputWithPooling(
            last_hidden_state=out.last_hidden_state, pooler_output=features
        )

    module.get_image_features = get_image_features
