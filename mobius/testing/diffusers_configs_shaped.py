"""Small configs for the diffusers classes whose forward arguments are sized by the class's own
shape rules (``mobius/diffusers/argument_rules.py``): image projections, AnyFlow's dual
timestep, I2VGen-XL's frame rate and image conditioning.
"""

from __future__ import annotations

from typing import Any

from mobius.testing.diffusers_configs_more import WAN

# fmt: off
SHAPED_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("CLIPImageProjection", "CLIPImageProjection", {"hidden_size": 16}),
    ("ReduxImageEncoder", "ReduxImageEncoder", {"redux_dim": 16, "txt_in_features": 12}),
    ("AnyFlowTransformer3DModel", "AnyFlowTransformer3DModel", WAN),
    ("I2VGenXLUNet", "I2VGenXLUNet",
     {"block_out_channels": (8, 16), "layers_per_block": 1, "norm_num_groups": 4,
      "down_block_types": ("CrossAttnDownBlock3D", "DownBlock3D"),
      "up_block_types": ("UpBlock3D", "CrossAttnUpBlock3D"), "cross_attention_dim": 16,
      "attention_head_dim": 4, "num_attention_heads": 4, "in_channels": 4, "out_channels": 4}),
    ("ErnieImageTransformer2DModel", "ErnieImageTransformer2DModel",
     {"hidden_size": 16, "num_attention_heads": 2, "num_layers": 1, "ffn_hidden_size": 32,
      "in_channels": 4, "out_channels": 4, "patch_size": 2, "text_in_dim": 12,
      "rope_axes_dim": (2, 2, 4)}),
    ("UVit2DModel", "UVit2DModel",
     {"hidden_size": 16, "cond_embed_dim": 12, "micro_cond_encode_dim": 4,
      "micro_cond_embed_dim": 20, "encoder_hidden_size": 12, "vocab_size": 40,
      "codebook_size": 32, "in_channels": 8, "block_out_channels": 16, "num_res_blocks": 1,
      "downsample": True, "upsample": True, "block_num_heads": 2, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 32, "sample_size": 8}),
    ("AutoencoderKLHunyuanImageRefiner", "AutoencoderKLHunyuanImageRefiner",
     {"latent_channels": 4, "block_out_channels": (8, 16), "layers_per_block": 1,
      "spatial_compression_ratio": 2, "temporal_compression_ratio": 2}),
    ("Kandinsky5Transformer3DModel", "Kandinsky5Transformer3DModel",
     {"in_visual_dim": 4, "out_visual_dim": 4, "in_text_dim": 12, "in_text_dim2": 10,
      "time_dim": 16, "model_dim": 16, "ff_dim": 32, "num_text_blocks": 1,
      "num_visual_blocks": 1, "axes_dims": (2, 2, 4), "visual_cond": True}),
    ("WanVACETransformer3DModel", "WanVACETransformer3DModel",
     WAN | {"vace_layers": [0], "vace_in_channels": 8}),
]
# fmt: on
