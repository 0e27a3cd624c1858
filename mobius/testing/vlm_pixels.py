"""Vision inputs for parity: random images in the layout the vision graph takes
(``tasks.vlm_inputs.vision_inputs``), several images of different sizes where the layout allows,
and what HF makes of them per image."""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch

from mobius.tasks.vlm import vision_outputs
from mobius.tasks.vlm_inputs import grid_merge_size
from mobius.verification.pairs import for_torch


def pixel_inputs(model: Any, images: int = 1, seed: int = 3) -> dict[str, torch.Tensor]:
    """Random images in the layout the vision graph takes (``vision_inputs``)."""
    from mobius.sources.config import from_hf
    from mobius.tasks.vlm import vision_inputs

    gen = torch.Generator().manual_seed(seed)
    specs = {s.name: s for s in vision_inputs(from_hf(model.config))}
    out = {}
    if "image_grid_thw" in specs:  # grids of (1, 2, 3) and (1, 2, 2) blocks of merged patches
        merge = grid_merge_size(model.config.vision_config)
        grid = torch.tensor([[1, 2 * merge, (3 - i % 2) * merge] for i in range(images)])
        out["image_grid_thw"] = grid
        rest = specs["pixel_values"].dims[1:]
        out["pixel_values"] = torch.randn(int(grid.prod(-1).sum()), *rest, generator=gen)
        inner = getattr(model, "model", model)  # VideoLLaMA3: HF's only (images merge at 1)
        if "image_merge_sizes" in inspect.signature(inner.get_image_features).parameters:
            out["image_merge_sizes"] = torch.ones(images, dtype=torch.int64)
        return out
    if "image_position_ids" in specs:
        return position_patches(specs["pixel_values"], images, gen)
    if "target_sizes" in specs:  # packed patches: images of (u, 2u) and (2u, u) patches
        return _packed_pixels(specs["pixel_values"], model, images, gen)
    if "spatial_shapes" in specs:  # patch rows padded to 16: images of 2 x 6 patches
        return _patch_rows(specs["pixel_values"], images, gen)
    if "flattened_patches" in specs:  # Kosmos-2.5: Pix2Struct-style (row, column, pixels) rows
        from mobius.testing.seq2seq_images import flattened_patches

        # the tower finds padding patches by their zeros itself: no mask input
        patches = flattened_patches(specs["flattened_patches"].dims[-1], images, gen)
        return {"flattened_patches": patches["flattened_patches"]}
    sizes = {
        "num_images": images,
        "batch": 1,
        "num_patches": 16,
        "qformer_sequence_length": 5,
        "num_frames": 2,  # a video's frames (a model that takes videos only)
    }
    if "image_height" in specs["pixel_values"].dims:  # images of their own sizes, padded
        return _padded_images(specs["pixel_values"], model, images, gen)
    if "num_tiles" in specs["pixel_values"].dims:  # anyres tiles of images of their own sizes
        return _tiled_images(specs["pixel_values"], model, images, gen)
    for name, spec in specs.items():
        dims = [sizes.get(d, d) for d in spec.dims]
        if spec.dtype == torch.bool:  # every pixel real
            out[name] = torch.ones(*dims, dtype=torch.bool)
        elif name in _VALUES:
            out[name] = _VALUES[name](model, dims, gen).to(spec.dtype)
        else:
            out[name] = torch.randn(*dims, generator=gen)
    return out


def _padded_images(
    spec: Any, model: Any, images: int, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """Pixtral towers' batch (``vlm_inputs.padded_images_inputs``): images of (short, side) and
    (side, short) pixels alternately, zero-padded to the largest, and their ``image_sizes``."""
    side, unit = _pixel_size(model)[0], spec.multiple_of
    short = max(side - unit, unit)
    sizes = torch.tensor([[short, side] if i % 2 == 0 else [side, short] for i in range(images)])
    height, width = (int(v) for v in sizes.max(0).values)
    pixels = torch.zeros(images, spec.dims[1], height, width)
    for i, (h, w) in enumerate(sizes.tolist()):
        pixels[i, :, :h, :w] = torch.randn(spec.dims[1], h, w, generator=gen)
    return {"pixel_values": pixels, "image_sizes": sizes}


def _tiled_images(
    spec: Any, model: Any, images: int, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """Anyres tiles (``vlm_inputs.tiled_inputs``) of images wider and taller than one tile
    alternately, each with ``1 +`` its best resolution's tiles, padded to the most."""
    from mobius.synth.overrides.llava_next import best_resolution

    tile = spec.dims[-1]
    shapes = [(tile * 5 // 8, tile * 3 // 2), (tile * 15 // 8, tile * 5 // 4)]
    sizes = torch.tensor([shapes[i % 2] for i in range(images)])
    best = best_resolution(sizes, model.config.image_grid_pinpoints).to(torch.int64) // tile
    counts = (1 + best.prod(-1)).tolist()
    pixels = torch.zeros(images, max(counts), *spec.dims[2:])
    for i, count in enumerate(counts):
        pixels[i, :count] = torch.randn(count, *spec.dims[2:], generator=gen)
    return {"pixel_values": pixels, "image_sizes": sizes}


def _packed_pixels(
    spec: Any, model: Any, images: int, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """Packed images (``vlm_inputs.packed_inputs``): each side ``u`` or ``2u`` patches, where
    ``u * u`` patches make one feature."""
    patch = model.config.vision_config.patch_size
    unit = math.isqrt(spec.multiple_of // patch)
    sizes = torch.tensor(
        [[unit, 2 * unit] if i % 2 == 0 else [2 * unit, unit] for i in range(images)]
    )
    width = int(sizes.prod(-1).sum()) * patch
    pixels = torch.randn(1, *spec.dims[1:3], width, generator=gen)
    return {"pixel_values": pixels, "target_sizes": sizes.to(torch.int32)}


def _patch_rows(spec: Any, images: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Siglip2's NaFlex layout (``vlm_inputs.patch_sequence_inputs``): images of 2 x 6 and 2 x 4
    patches alternately, in rows of 16, the rest padding (zeros, masked out)."""
    width = 16
    shapes = torch.tensor([[2, 6] if i % 2 == 0 else [2, 4] for i in range(images)])
    pixels = torch.randn(images, width, spec.dims[-1], generator=gen)
    mask = (torch.arange(width)[None] < shapes.prod(-1)[:, None]).to(torch.int32)
    return {
        "pixel_values": pixels * mask[..., None],
        "spatial_shapes": shapes,
        "pixel_attention_mask": mask,
    }


def _fixed_size(model: Any, dims: list, gen: torch.Generator) -> torch.Tensor:
    """Each image's (height, width) in pixels: the anyres graph's fixed resolution."""
    from mobius.tasks.vlm_inputs import fixed_resolution

    return torch.tensor([list(fixed_resolution(model.config))] * dims[0])


def _pixel_size(model: Any) -> tuple[int, int]:
    size = model.config.vision_config.image_size
    return tuple(size) if isinstance(size, (list, tuple)) else (size, size)


def _qformer_ids(model: Any, dims: list, gen: torch.Generator) -> torch.Tensor:
    vocab = model.config.qformer_config.vocab_size
    return torch.randint(3, vocab, dims, generator=gen)


# inputs whose values must agree with the images (vlm_inputs.EXTRA_INPUTS' names)
_VALUES = {"image_sizes": _fixed_size, "qformer_input_ids": _qformer_ids}


def position_patches(spec: Any, images: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Gemma 4's patchified images (``vision_inputs``): grids of 2u x 3u and 2u x 2u patches
    alternately, where u x u patches pool to one feature, in row-major order with (x, y)
    positions, padded to the largest with position (-1, -1) and zero pixels, as the processor
    pads them."""
    unit = math.isqrt(spec.multiple_of)
    most = 6 * unit * unit
    pixels = torch.zeros(images, most, spec.dims[-1])
    positions = torch.full((images, most, 2), -1, dtype=torch.int64)
    for i in range(images):
        rows, columns = 2 * unit, (3 if i % 2 == 0 else 2) * unit
        y, x = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
        count = rows * columns
        positions[i, :count] = torch.stack([x.flatten(), y.flatten()], -1)
        pixels[i, :count] = torch.rand(count, spec.dims[-1], generator=gen)
    return {"pixel_values": pixels, "image_position_ids": positions}


def images_fed(model: Any, pixels: dict[str, torch.Tensor]) -> int:
    """How many images ``pixels`` holds: the extent of the vision inputs' ``num_images`` axis
    (1 where the graph takes one image per call)."""
    from mobius.sources.config import from_hf
    from mobius.tasks.vlm import vision_inputs

    for spec in vision_inputs(from_hf(model.config)):
        if "num_images" in spec.dims:
            return int(pixels[spec.name].shape[spec.dims.index("num_images")])
    return 1


def image_runs(model: Any, pixels: dict[str, torch.Tensor]) -> list[int]:
    """Each image's count of features, by HF's ``get_image_features`` (its per-image
    ``pooler_output``); one run of them all where it gives no split."""
    from mobius.tasks.vlm import _inner
    from mobius.tasks.vlm_inputs import features_method

    with torch.no_grad():
        out = features_method(_inner(model))(**for_torch(model, pixels), return_dict=True)
    pooled = getattr(out, "pooler_output", None)
    if isinstance(pooled, (list, tuple)) and all(torch.is_tensor(p) for p in pooled):
        return [int(p.reshape(-1, p.shape[-1]).shape[0]) for p in pooled]
    if torch.is_tensor(pooled) and pooled.dim() == 3:  # [images, tokens, hidden]
        return [pooled.shape[1]] * pooled.shape[0]
    return [vision_outputs(model, for_torch(model, pixels))[0].shape[0]]
