"""Small configs for the HunyuanVideo classes whose prompt compaction and masks take per-family
overrides (``mobius/diffusers/overrides/hunyuan_video15.py``) and the 1.5 VAE's causal
attention mask."""

from __future__ import annotations

from typing import Any

# fmt: off
HUNYUAN_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("HunyuanVideo15Transformer3DModel", "HunyuanVideo15Transformer3DModel",
     {"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 8,
      "num_layers": 1, "num_refiner_layers": 1, "text_embed_dim": 12, "text_embed_2_dim": 10,
      "image_embed_dim": 14, "rope_axes_dim": (2, 2, 4)}),
    ("HunyuanVideoFramepackTransformer3DModel", "HunyuanVideoFramepackTransformer3DModel",
     {"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 8,
      "num_layers": 1, "num_single_layers": 1, "num_refiner_layers": 1, "patch_size": 2,
      "text_embed_dim": 12, "pooled_projection_dim": 10, "rope_axes_dim": (2, 2, 4),
      "guidance_embeds": True, "has_image_proj": True, "image_proj_dim": 14,
      "has_clean_x_embedder": True}),
    # 4x spatial (two levels) and 2x temporal compression (the first level): 1 + 2k frames
    ("AutoencoderKLHunyuanVideo15", "AutoencoderKLHunyuanVideo15",
     {"latent_channels": 4, "block_out_channels": (8, 16, 16), "layers_per_block": 1,
      "spatial_compression_ratio": 4, "temporal_compression_ratio": 2}),
]
# fmt: on
