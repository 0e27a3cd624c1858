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
    ("StableCascadeUNet", "StableCascadeUNet",
     {"in_channels": 4, "out_channels": 4, "timestep_ratio_embedding_dim": 8,
      "conditioning_dim": 16, "block_out_channels": (16, 16), "num_attention_heads": (2, 2),
      "down_num_layers_per_block": (1, 1), "up_num_layers_per_block": (1, 1),
      "clip_text_pooled_in_channels": 12, "clip_seq": 2, "dropout": (0.0, 0.0)}),
    ("AutoencoderVidTok", "AutoencoderVidTok",
     {"ch": 8, "ch_mult": [1, 2], "z_channels": 4, "num_res_blocks": 1}),
    ("Kandinsky6Transformer3DModel", "Kandinsky6Transformer3DModel",
     {"in_visual_dim": 4, "out_visual_dim": 4, "in_text_dim": 12, "in_text_dim2": 10,
      "time_dim": 16, "model_dim": 16, "ff_dim": 32, "num_text_blocks": 1,
      "num_visual_blocks": 1, "axes_dims": (2, 2, 4), "visual_cond": True, "in_audio_dim": 4,
      "out_audio_dim": 4, "axes_dims_a": (8,)}),
    ("Krea2Transformer2DModel", "Krea2Transformer2DModel",
     {"in_channels": 8, "num_layers": 1, "attention_head_dim": 8, "num_attention_heads": 2,
      "num_key_value_heads": 1, "intermediate_size": 32, "timestep_embed_dim": 16,
      "text_hidden_dim": 12, "num_text_layers": 2, "text_num_attention_heads": 2,
      "text_num_key_value_heads": 2, "text_intermediate_size": 24,
      "num_layerwise_text_blocks": 1, "num_refiner_text_blocks": 1, "axes_dims_rope": (2, 2, 4)}),
    ("Ideogram4Transformer2DModel", "Ideogram4Transformer2DModel",
     {"in_channels": 8, "num_layers": 1, "attention_head_dim": 8, "num_attention_heads": 2,
      "intermediate_size": 32, "adaln_dim": 16, "llm_features_dim": 12,
      "mrope_section": (2, 1, 1)}),
]
# fmt: on
