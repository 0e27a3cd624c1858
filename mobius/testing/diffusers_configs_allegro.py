"""Small config for AutoencoderKLAllegro, which only encodes and decodes tile by tile
(``mobius/diffusers/tiled_vae.py``): its tile overlaps are hard-coded (120 rows, 80 columns),
so ``sample_size`` exceeds them (128: strides of 8 rows and 48 columns), and a tile is 24 frames;
channels stay few so that the 24 x 128 x 128 tiles convert and run in seconds."""

from __future__ import annotations

from typing import Any

ALLEGRO = {
    "block_out_channels": (8, 8),
    "down_block_types": ("AllegroDownBlock3D",) * 2,
    "up_block_types": ("AllegroUpBlock3D",) * 2,
    "temporal_downsample_blocks": (True, True),
    "temporal_upsample_blocks": (True, True),
    "latent_channels": 4,
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "sample_size": 128,
}

ALLEGRO_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("AutoencoderKLAllegro", "AutoencoderKLAllegro", ALLEGRO),
]
