"""Small configs for Kandinsky 6's SR transformer (its NABLA attention dense under the kept
blocks' mask: ``mobius/diffusers/overrides/kandinsky6_sr.py``)."""

from __future__ import annotations

from typing import Any

# patch 1: every latent a token, so the latents' sides are the token grid's, multiples of 8
# (8x8 token squares make the 64-token blocks); a temporal window of 3 and spatial windows of 1
# leave blocks outside the sliding-tile prior, which the threshold then drops or keeps
K6SR = {
    "in_visual_dim": 4, "out_visual_dim": 8, "time_dim": 16, "model_dim": 16, "ff_dim": 32,
    "num_visual_blocks": 2, "axes_dims": (2, 2, 4), "nabla_window": (3, 1, 1),
}  # fmt: skip

K6SR_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("Kandinsky6SRTransformer3DModel", "Kandinsky6SRTransformer3DModel", K6SR),
    # a lower threshold drops more blocks; the prior's window spans rows instead of frames
    (
        "Kandinsky6SRTransformer3DModel (threshold 0.5)",
        "Kandinsky6SRTransformer3DModel",
        {**K6SR, "nabla_threshold": 0.5, "nabla_window": (1, 3, 1)},
    ),
]
