"""Small configs for Wan Animate 2's transformer (``WanAnimate2Transformer3DModel``): one graph
per ``kv_cache_mode``, the reference cache between them (``mobius/diffusers/reference_cache.py``,
``mobius/diffusers/overrides/wan_animate2.py``)."""

from __future__ import annotations

from typing import Any

# 2 heads of 8 (rotary split 4 + 2 + 2), a prompt padded to 16 tokens, 4 latent channels and 8
# of conditioning (the i2v mask's 4 and the reference latents' 4); the reference's width offset
# is the grid's (-1, the class's default), CLIP image tokens projected from 1280 (fixed)
WAN_ANIMATE2 = {
    "patch_size": (1, 2, 2), "text_len": 16, "in_dim": 12, "dim": 16, "ffn_dim": 32,
    "freq_dim": 16, "text_dim": 12, "out_dim": 4, "num_heads": 2, "num_layers": 2,
}  # fmt: skip

WANA2_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("WanAnimate2Transformer3DModel", "WanAnimate2Transformer3DModel", WAN_ANIMATE2),
    # 10 layers, so that the unconditional branch skips block 9 (its own graph); the reference's
    # frames strided by 2 and offset by its frame count; no CLIP image tokens
    ("WanAnimate2Transformer3DModel (10 layers, strided reference)",
     "WanAnimate2Transformer3DModel",
     WAN_ANIMATE2 | {"num_layers": 10, "refer_stride": 2, "refer_offset_t": -1,
                     "refer_offset_h": 3, "use_img_emb": False}),
]  # fmt: skip
