"""Small configs for the diffusers classes whose latent grid or prompt length reaches forward as
Python ints (``mobius/diffusers/latent_grid.py``): the QwenImage family.
"""

from __future__ import annotations

from typing import Any

# patch tokens of 4 latent channels x 2 x 2; rotary pairs 2 + 3 + 3 of a head of 16
QWEN_IMAGE = {
    "patch_size": 2, "in_channels": 16, "out_channels": 4, "num_layers": 2,
    "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 12,
    "axes_dims_rope": (4, 6, 6),
}  # fmt: skip

# 4 layers: the fourth takes the first's skip; prompts padded to 5 and 6 tokens; the T5 width a
# multiple of the 8 heads of its attention pooling
HUNYUAN_DIT = {
    "num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 4, "patch_size": 2,
    "sample_size": 8, "hidden_size": 16, "mlp_ratio": 2.0, "cross_attention_dim": 12,
    "cross_attention_dim_t5": 16, "pooled_projection_dim": 8, "text_len": 5, "text_len_t5": 6,
}  # fmt: skip

# fmt: off
GRID_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("QwenImageTransformer2DModel", "QwenImageTransformer2DModel", QWEN_IMAGE),
    ("QwenImageControlNetModel", "QwenImageControlNetModel",
     QWEN_IMAGE | {"extra_condition_channels": 4}),
    # latents unpatched (patch_size 1), 2 x 2 latent tokens per image slot
    ("QwenImage21Transformer2DModel", "QwenImage21Transformer2DModel",
     {"patch_size": 1, "in_channels": 4, "out_channels": 4, "num_layers": 2,
      "attention_head_dim": 16, "num_attention_heads": 2, "context_in_dim": 12, "mlp_ratio": 2,
      "axes_dims_rope": (4, 6, 6)}),
    # one dense block (its width rounds down to a multiple of 128: mlp_ratio 6 gives 128) and
    # two routed: 4 experts, each taking the top 2 (then 1.5) x tokens / 4 of them
    ("NucleusMoEImageTransformer2DModel", "NucleusMoEImageTransformer2DModel",
     {"patch_size": 2, "in_channels": 16, "out_channels": 4, "num_layers": 3,
      "attention_head_dim": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
      "joint_attention_dim": 12, "axes_dims_rope": (4, 6, 6), "mlp_ratio": 6.0,
      "dense_moe_strategy": "leave_first_block_dense", "num_experts": 4,
      "moe_intermediate_dim": 24, "capacity_factors": [2.0, 2.0, 1.5]}),
    ("HunyuanDiT2DModel", "HunyuanDiT2DModel", HUNYUAN_DIT | {"num_layers": 4}),
    # a ControlNet block per skip of a 6-layer transformer's first half: 2
    ("HunyuanDiT2DControlNetModel", "HunyuanDiT2DControlNetModel",
     HUNYUAN_DIT | {"transformer_num_layers": 6}),
    # one double-stream and one single-stream block, each reading one Llama layer (indices up to
    # 3: the graph takes 4 layers or more); 4 experts, 2 per token; tokens padded to 32 x 32 /
    # 4 in diffusers for non-square latents
    ("HiDreamImageTransformer2DModel", "HiDreamImageTransformer2DModel",
     {"patch_size": 2, "in_channels": 4, "out_channels": 4, "num_layers": 1,
      "num_single_layers": 1, "attention_head_dim": 8, "num_attention_heads": 2,
      "caption_channels": [12, 10], "text_emb_dim": 8, "num_routed_experts": 4,
      "num_activated_experts": 2, "axes_dims_rope": (4, 2, 2), "max_resolution": (32, 48),
      "llama_layers": [1, 3]}),
    # a 64-pixel default image: proportional attention's base length (64 / 16)^2 = 16
    ("LuminaNextDiT2DModel", "LuminaNextDiT2DModel",
     {"sample_size": 8, "patch_size": 2, "in_channels": 4, "hidden_size": 32, "num_layers": 2,
      "num_attention_heads": 2, "num_kv_heads": 1, "multiple_of": 16, "cross_attention_dim": 12}),
]
# fmt: on
