"""Small configs for the diffusers classes under the generic contract (``mobius/diffusers/
generic.py``: forward's arguments in, the output dataclass out) and for config variants of the
swept classes that trace differently (ControlNet conditioning embeddings of 2, 3 and 4 levels,
PixArt's resolution conditioning, CogVideoX 1.5's temporal patches, Wan's short rotary table, a
Transformer2DModel without adaptive norms).
"""

from __future__ import annotations

from typing import Any

from mobius.testing.diffusers_tiny import CROSS_DIM

CONTROLNET = {"block_out_channels": (8, 16), "layers_per_block": 1, "norm_num_groups": 4,
              "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"), "in_channels": 4,
              "cross_attention_dim": CROSS_DIM, "attention_head_dim": 4}  # fmt: skip

# fmt: off
ANY_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("UNet1DModel", "UNet1DModel",
     {"sample_size": 64, "in_channels": 2, "out_channels": 2, "extra_in_channels": 16,
      "block_out_channels": (32, 32, 32), "norm_num_groups": 8, "time_embedding_dim": 16}),
    ("UNet3DConditionModel", "UNet3DConditionModel",
     {"block_out_channels": (8, 16), "layers_per_block": 1, "norm_num_groups": 4,
      "down_block_types": ("CrossAttnDownBlock3D", "DownBlock3D"),
      "up_block_types": ("UpBlock3D", "CrossAttnUpBlock3D"), "cross_attention_dim": CROSS_DIM,
      "attention_head_dim": 4, "in_channels": 4, "out_channels": 4}),
    ("UNetSpatioTemporalConditionModel", "UNetSpatioTemporalConditionModel",
     {"block_out_channels": (32, 64), "layers_per_block": 1,
      "down_block_types": ("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
      "up_block_types": ("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
      "cross_attention_dim": CROSS_DIM, "num_attention_heads": (2, 4), "in_channels": 8,
      "out_channels": 4, "addition_time_embed_dim": 4, "projection_class_embeddings_input_dim": 12,
      "num_frames": 5}),
    ("PriorTransformer", "PriorTransformer",
     {"num_attention_heads": 2, "attention_head_dim": 8, "num_layers": 1, "embedding_dim": 16,
      "num_embeddings": 6, "additional_embeddings": 4}),
    ("SD3ControlNetModel", "SD3ControlNetModel",
     {"sample_size": 8, "patch_size": 2, "in_channels": 4, "out_channels": 4, "num_layers": 2,
      "attention_head_dim": 8, "num_attention_heads": 2, "joint_attention_dim": 12,
      "caption_projection_dim": 16, "pooled_projection_dim": 10, "pos_embed_max_size": 32}),
    ("FluxControlNetModel", "FluxControlNetModel",
     {"patch_size": 1, "in_channels": 8, "num_layers": 1, "num_single_layers": 1,
      "attention_head_dim": 8, "num_attention_heads": 2, "joint_attention_dim": 12,
      "pooled_projection_dim": 10, "guidance_embeds": False, "axes_dims_rope": (2, 2, 4)}),
    ("SanaControlNetModel", "SanaControlNetModel",
     {"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 8,
      "num_layers": 2, "num_cross_attention_heads": 2, "cross_attention_head_dim": 8,
      "cross_attention_dim": 16, "caption_channels": 12, "mlp_ratio": 2.0, "sample_size": 8,
      "patch_size": 1}),
    ("AudioLDM2UNet2DConditionModel", "AudioLDM2UNet2DConditionModel",
     {"block_out_channels": (8, 16), "layers_per_block": 1, "norm_num_groups": 4,
      "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
      "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"), "cross_attention_dim": CROSS_DIM,
      "attention_head_dim": 4, "in_channels": 4, "out_channels": 4}),
    ("ControlNetModel (conditioning embedding of 2 levels)", "ControlNetModel",
     {**CONTROLNET, "conditioning_embedding_out_channels": (4, 8)}),
    ("ControlNetModel (conditioning embedding of 3 levels)", "ControlNetModel",
     {**CONTROLNET, "conditioning_embedding_out_channels": (4, 8, 8)}),
    ("ControlNetModel (conditioning embedding of 4 levels)", "ControlNetModel",
     {**CONTROLNET, "conditioning_embedding_out_channels": (4, 4, 8, 16)}),
    ("PixArtTransformer2DModel (resolution conditioning)", "PixArtTransformer2DModel",
     {"num_attention_heads": 2, "attention_head_dim": 12, "in_channels": 4, "out_channels": 8,
      "num_layers": 1, "sample_size": 128, "patch_size": 2, "cross_attention_dim": 24,
      "caption_channels": 12}),
    ("CogVideoXTransformer3DModel (1.5: temporal patches)", "CogVideoXTransformer3DModel",
     {"num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 4, "out_channels": 4,
      "time_embed_dim": 16, "text_embed_dim": 12, "num_layers": 1, "sample_width": 8,
      "sample_height": 8, "sample_frames": 9, "max_text_seq_length": 8, "patch_size_t": 2,
      "use_rotary_positional_embeddings": True}),
    ("CogVideoXTransformer3DModel (sincos positions)", "CogVideoXTransformer3DModel",
     {"num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 4, "out_channels": 4,
      "time_embed_dim": 16, "text_embed_dim": 12, "num_layers": 1, "sample_width": 8,
      "sample_height": 8, "sample_frames": 9, "max_text_seq_length": 8,
      "use_rotary_positional_embeddings": False}),
    ("WanTransformer3DModel (rotary table of 32)", "WanTransformer3DModel",
     {"patch_size": (1, 2, 2), "num_attention_heads": 2, "attention_head_dim": 8,
      "in_channels": 4, "out_channels": 4, "text_dim": 12, "freq_dim": 16, "ffn_dim": 32,
      "num_layers": 1, "rope_max_seq_len": 32}),
    ("Transformer2DModel (discrete latents, VQ-Diffusion)", "Transformer2DModel",
     {"num_attention_heads": 2, "attention_head_dim": 8, "num_vector_embeds": 17,
      "sample_size": 4, "num_layers": 1, "cross_attention_dim": 12, "norm_type": "ada_norm",
      "num_embeds_ada_norm": 10}),
    ("Transformer2DModel (layer norm, no timestep)", "Transformer2DModel",
     {"in_channels": 8, "norm_num_groups": 4, "num_attention_heads": 2, "attention_head_dim": 4,
      "cross_attention_dim": 12, "num_layers": 1, "norm_type": "layer_norm"}),
]
# fmt: on
