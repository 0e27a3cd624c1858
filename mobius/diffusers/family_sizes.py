"""Axes whose sizes follow the latents' and the prompt's by one family's arithmetic, beside
the shared ones of ``tasks.related_sizes``: AnyFlow FAR's KV-cache buffers (``far_chunks.py``) and
Cosmos 3's noisy frames and joint sequence (``cosmos3_args.py``).

A leaf under ``tasks.py``: it imports the axis names only, so the contracts can size these axes
and the family modules can build their tasks without an import circle.
"""

from __future__ import annotations

from typing import Any

from mobius.diffusers.axes import FRAMES, HEIGHT, WIDTH
from mobius.tasks.base import SEQUENCE

# AnyFlow FAR: the pipeline's KV-cache buffers, [2 (key, value), batch, heads, length, head_dim]
DEFAULT_PARTITION = (1, 3, 3, 3, 3, 3, 3, 2)  # the class's default (81 frames, 21 latent)
FULL_CACHE = "full_cache_length"  # full_chunk_limit x the largest chunk's full-resolution tokens
COMPRESSED_CACHE = "compressed_cache_length"  # the compressed context's, as the pipeline sizes it

# Cosmos 3's omni transformer: one vision item per call
JOINT = "cosmos3_joint_length"  # the prompt's tokens then the item's patches
NOISY_FRAMES = "noisy_frames"  # the item's frames that are denoised (the others condition)
NOISY_TOKENS = "noisy_tokens"  # their patches


def chunk_partition(cfg: Any) -> list[int]:
    """AnyFlow FAR's frames per chunk, as the config gives them."""
    return [int(n) for n in cfg.get("chunk_partition") or DEFAULT_PARTITION]


def far_cache_lengths(cfg: Any, sizes: dict[str, int]) -> dict[str, int]:
    """AnyFlow FAR's cache buffers' lengths at ``sizes``'s latent grid, as the pipeline allocates
    them (no entry for a config without ``chunk_partition``)."""
    if not cfg.get("chunk_partition"):
        return {}
    patch, compressed = cfg.get("patch_size") or (1, 2, 2), cfg.get("compressed_patch_size")
    compressed = compressed or (1, 4, 4)
    full_tokens = (sizes[HEIGHT] // patch[1]) * (sizes[WIDTH] // patch[2])
    compressed_tokens = (sizes[HEIGHT] // compressed[1]) * (sizes[WIDTH] // compressed[2])
    chunks, limit = chunk_partition(cfg), cfg.get("full_chunk_limit") or 3
    return {
        FULL_CACHE: limit * max(chunks) * full_tokens,
        COMPRESSED_CACHE: max(len(chunks) - limit + 1, 1) * max(chunks) * compressed_tokens,
    }


def cosmos3_grid(cfg: Any, frames: Any, height: Any, width: Any) -> tuple[Any, Any, Any]:
    """Cosmos 3's patch grid of an item, as the pipeline's ``vision_token_shapes`` (sides padded
    up to whole patches)."""
    p = cfg.get("latent_patch_size") or 2
    return frames, (height + p - 1) // p, (width + p - 1) // p


def cosmos3_sizes(cfg: Any, sizes: dict[str, Any]) -> dict[str, int]:
    """Cosmos 3's axes that follow the latents' and the prompt's: every frame but the first noisy
    (an image-conditioned video; the graph takes any count), their patches, the joint length."""
    if not all(isinstance(sizes.get(a), int) for a in (SEQUENCE, FRAMES, HEIGHT, WIDTH)):
        return {}
    frames, rows, cols = cosmos3_grid(cfg, sizes[FRAMES], sizes[HEIGHT], sizes[WIDTH])
    noisy = max(frames - 1, 1)
    return {
        NOISY_FRAMES: noisy,
        NOISY_TOKENS: noisy * rows * cols,
        JOINT: sizes[SEQUENCE] + frames * rows * cols,
    }
