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
    # runs on a ZImageTransformer2DModel's embedders and refiners (SIBLINGS): dim, heads,
    # refiner layers and patch sizes as Z_IMAGE's
    ("ZImageControlNetModel", "ZImageControlNetModel",
     {"control_layers_places": [0], "control_in_dim": 4, "dim": 32, "n_refiner_layers": 1,
      "n_heads": 2, "n_kv_heads": 2}),
    # patch 2 (list_args.OMNIGEN_PATCH); su-scaled rotary factors, one per frequency
    ("OmniGenTransformer2DModel", "OmniGenTransformer2DModel",
     {"in_channels": 4, "patch_size": 2, "hidden_size": 32, "num_attention_heads": 2,
      "num_key_value_heads": 2, "intermediate_size": 48, "num_layers": 1, "pad_token_id": 0,
      "vocab_size": 16, "pos_embed_max_size": 32, "time_step_dim": 16,
      "rope_scaling": {"short_factor": [1.0, 1.1, 1.2, 1.3, 1.0, 1.5, 2.0, 1.0],
                       "long_factor": [2.0] * 8}}),
    ("JoyImageEditPlusTransformer3DModel", "JoyImageEditPlusTransformer3DModel",
     {"patch_size": [1, 2, 2], "in_channels": 4, "hidden_size": 32, "num_attention_heads": 2,
      "text_dim": 12, "mlp_width_ratio": 2.0, "num_layers": 1, "rope_dim_list": [4, 6, 6]}),
    # residual blocks: a stage's channels times its down-sampling factor must divide by the
    # next's (dim_mult [1, 2, 2]); image-only, one frame
    ("AutoencoderKLQwenImage21", "AutoencoderKLQwenImage21",
     {"base_dim": 8, "decoder_base_dim": 12, "z_dim": 4, "dim_mult": [1, 2, 2],
      "num_res_blocks": 1, "temperal_downsample": [False, True], "in_channels": 3,
      "out_channels": 3, "latents_mean": [0.0] * 4, "latents_std": [1.0] * 4}),
    # clips of 5 pixel frames, a temporal ratio of 2 (3 latent frames per clip, the last one of
    # them dropped): the decoder's overlap and pre-padding follow from the three
    ("AutoencoderKLMiniMaxH3", "AutoencoderKLMiniMaxH3",
     {"in_channels": 3, "out_channels": 3, "latent_channels": 4, "block_out_channels": (8, 16),
      "layers_per_block": 1, "spatial_downsample_factors": (2, 2),
      "temporal_downsample_factors": (1, 2), "norm_num_groups": 4, "decoder_num_layers": 1,
      "decoder_num_attention_heads": 2, "decoder_attention_head_dim": 8,
      "decoder_num_register_tokens": 2, "decoder_ffn_mult": 2, "clip_length": 5,
      "token_drop": 1, "latents_mean": (0.0,) * 4, "latents_std": (1.0,) * 4}),
]
# fmt: on

# the config label of the sibling a class runs on (mobius.diffusers.shared_modules.SHARES)
SIBLINGS = {"ZImageControlNetModel": "ZImageTransformer2DModel"}
