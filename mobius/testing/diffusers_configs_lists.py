"""Small configs for the diffusers classes whose forward takes Python lists of per-sample tensors
(``mobius/diffusers/list_args.py``: converted with one stacked tensor per list), and for classes
whose small config needs several keys to agree.
"""

from __future__ import annotations

from typing import Any

# fmt: off
Z_IMAGE = {"in_channels": 4, "dim": 32, "n_layers": 1, "n_refiner_layers": 1, "n_heads": 2,
           "n_kv_heads": 2, "cap_feat_dim": 12, "axes_dims": [4, 6, 6],
           "axes_lens": [256, 64, 64]}

LIST_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("ZImageTransformer2DModel", "ZImageTransformer2DModel", Z_IMAGE),
    # residual blocks: a stage's channels times its down-sampling factor must divide by the
    # next's (dim_mult [1, 2, 2]); image-only, one frame
    ("AutoencoderKLQwenImage21", "AutoencoderKLQwenImage21",
     {"base_dim": 8, "decoder_base_dim": 12, "z_dim": 4, "dim_mult": [1, 2, 2],
      "num_res_blocks": 1, "temperal_downsample": [False, True], "in_channels": 3,
      "out_channels": 3, "latents_mean": [0.0] * 4, "latents_std": [1.0] * 4}),
]
# fmt: on
