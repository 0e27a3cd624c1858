"""Small configs for the diffusers classes whose forward arguments are Python structures of
tensors (``mobius/diffusers/structured_args.py``: lists, lists of pairs, dicts), whose frames
are folded into the batch (``folded_frames.py``), or whose bare list output is named by index,
with the adapter variants that build different blocks.
"""

from __future__ import annotations

from typing import Any

from mobius.testing.diffusers_tiny import CROSS_DIM

# fmt: off
STRUCTURED_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("ControlNetUnionModel", "ControlNetUnionModel",
     {"block_out_channels": (8, 16), "layers_per_block": 1, "norm_num_groups": 4,
      "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"), "in_channels": 4,
      "cross_attention_dim": CROSS_DIM, "attention_head_dim": 4,
      "conditioning_embedding_out_channels": (4, 4, 8, 8), "addition_embed_type": "text_time",
      "addition_time_embed_dim": 4, "projection_class_embeddings_input_dim": 8 + 6 * 4,
      "num_control_type": 6, "num_trans_channel": 8, "num_trans_head": 2,
      "num_proj_channel": 8}),
    ("BriaFiboTransformer2DModel", "BriaFiboTransformer2DModel",
     {"patch_size": 1, "in_channels": 8, "num_layers": 1, "num_single_layers": 1,
      "attention_head_dim": 8, "num_attention_heads": 2, "joint_attention_dim": 12,
      "axes_dims_rope": (2, 2, 4), "text_encoder_dim": 10}),
    ("T5FilmDecoder", "T5FilmDecoder",
     {"input_dims": 8, "targets_length": 128, "d_model": 16, "num_layers": 1, "num_heads": 2,
      "d_kv": 8, "d_ff": 32, "dropout_rate": 0.0}),
    ("T2IAdapter", "T2IAdapter",
     {"in_channels": 3, "channels": (8, 16, 16), "num_res_blocks": 1, "downscale_factor": 8,
      "adapter_type": "full_adapter"}),
    ("T2IAdapter (full_adapter_xl)", "T2IAdapter",
     {"in_channels": 3, "channels": (8, 16, 16, 16), "num_res_blocks": 1,
      "downscale_factor": 16, "adapter_type": "full_adapter_xl"}),
    ("T2IAdapter (light_adapter)", "T2IAdapter",
     {"in_channels": 3, "channels": (8, 16, 16), "num_res_blocks": 1, "downscale_factor": 8,
      "adapter_type": "light_adapter"}),
    ("TransformerTemporalModel", "TransformerTemporalModel",
     {"num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 8, "norm_num_groups": 4,
      "num_layers": 1}),
    ("TransformerTemporalModel (sinusoidal positions)", "TransformerTemporalModel",
     {"num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 8, "norm_num_groups": 4,
      "num_layers": 1, "positional_embeddings": "sinusoidal", "num_positional_embeddings": 32}),
    ("AutoencoderKLTemporalDecoder", "AutoencoderKLTemporalDecoder",  # group norms of 32
     {"block_out_channels": (32, 32), "layers_per_block": 1, "latent_channels": 4,
      "down_block_types": ("DownEncoderBlock2D", "DownEncoderBlock2D")}),
    ("MiniMaxMusic3ConditionEncoder", "MiniMaxMusic3ConditionEncoder",
     {"condition_hidden_dim": 8, "num_condition_layers": 2, "out_dim": 12}),
]
# fmt: on
