"""Small configs for diffusers model classes (the sweep's and the tests' cases).

Each entry: a label, the class name, and the config keyword arguments that keep it small (two
resolutions or one layer, 4-16 channels) while keeping every block kind of the default.
"""

from __future__ import annotations

from typing import Any

import torch

from mobius.testing.diffusers_tiny import CROSS_DIM, UNET_CONFIG, VAE_CONFIG
from mobius.testing.tiny import randomize


def randomize_scaled(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """``randomize``, then every weight matrix or kernel divided by the square root of its
    fan-in (std ``0.5 / sqrt(fan_in)``): activations stay of order one through stacks without
    norms (AutoencoderTiny's encoder reaches ~400 otherwise, where atol 1e-4 is below float32's
    resolution). Every parameter is still random."""
    randomize(model, seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                fan_in = param[0].numel()
                param.mul_(0.5 / 0.3 / fan_in**0.5)
    return model


SMALL_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [  # fmt: skip
    ("UNet2DConditionModel", "UNet2DConditionModel", UNET_CONFIG),
    (
        "UNet2DConditionModel (SDXL text_time)",
        "UNet2DConditionModel",
        {
            **UNET_CONFIG,
            "addition_embed_type": "text_time",
            "addition_time_embed_dim": 4,
            "projection_class_embeddings_input_dim": 8 + 6 * 4,
            "transformer_layers_per_block": 1,
        },
    ),
    (
        "UNet2DModel",
        "UNet2DModel",
        {
            "block_out_channels": (8, 16),
            "layers_per_block": 1,
            "norm_num_groups": 4,
            "in_channels": 3,
            "out_channels": 3,
            "attention_head_dim": 4,
            "sample_size": 16,
            "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
            "up_block_types": ("AttnUpBlock2D", "UpBlock2D"),
        },
    ),
    ("AutoencoderKL", "AutoencoderKL", VAE_CONFIG),
    (
        "AutoencoderTiny",
        "AutoencoderTiny",
        {
            "encoder_block_out_channels": (8, 8),
            "decoder_block_out_channels": (8, 8),
            "num_encoder_blocks": (1, 1),
            "num_decoder_blocks": (1, 1),
            "latent_channels": 4,
        },
    ),
    (
        "DiTTransformer2DModel",
        "DiTTransformer2DModel",
        {
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "in_channels": 4,
            "out_channels": 8,
            "num_layers": 1,
            "sample_size": 8,
            "patch_size": 2,
            "num_embeds_ada_norm": 10,
        },
    ),
    (
        "PixArtTransformer2DModel",
        "PixArtTransformer2DModel",
        {
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "in_channels": 4,
            "out_channels": 8,
            "num_layers": 1,
            "sample_size": 8,
            "patch_size": 2,
            "cross_attention_dim": 16,
            "caption_channels": 12,
        },
    ),
    (
        "SD3Transformer2DModel",
        "SD3Transformer2DModel",
        {
            "sample_size": 8,
            "patch_size": 2,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 12,
            "caption_projection_dim": 16,
            "pooled_projection_dim": 10,
            "pos_embed_max_size": 16,
        },
    ),
    (
        "FluxTransformer2DModel",
        "FluxTransformer2DModel",
        {
            "patch_size": 1,
            "in_channels": 8,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 12,
            "pooled_projection_dim": 10,
            "guidance_embeds": False,
            "axes_dims_rope": (2, 2, 4),
        },
    ),
    (
        "ControlNetModel",
        "ControlNetModel",
        {
            "block_out_channels": (8, 16),
            "layers_per_block": 1,
            "norm_num_groups": 4,
            "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
            "in_channels": 4,
            "cross_attention_dim": CROSS_DIM,
            "attention_head_dim": 4,
            "conditioning_embedding_out_channels": (4, 4, 8, 8),
        },
    ),
    (
        "AutoencoderKL (16 latent channels, no quant convs)",
        "AutoencoderKL",
        {
            **VAE_CONFIG,
            "latent_channels": 16,
            "use_quant_conv": False,
            "use_post_quant_conv": False,
        },
    ),
    (
        "AutoencoderDC",
        "AutoencoderDC",
        {
            "in_channels": 3,
            "latent_channels": 4,
            "attention_head_dim": 4,
            "encoder_block_types": ("ResBlock", "EfficientViTBlock"),
            "decoder_block_types": ("ResBlock", "EfficientViTBlock"),
            "encoder_block_out_channels": (8, 16),
            "decoder_block_out_channels": (8, 16),
            "encoder_layers_per_block": (1, 1),
            "decoder_layers_per_block": (1, 1),
            "encoder_qkv_multiscales": ((), (5,)),
            "decoder_qkv_multiscales": ((), (5,)),
            "upsample_block_type": "interpolate",
            "downsample_block_type": "Conv",
            "decoder_norm_types": "rms_norm",
            "decoder_act_fns": "silu",
        },
    ),
    (
        "VQModel",
        "VQModel",
        {
            "block_out_channels": (8, 16),
            "layers_per_block": 1,
            "norm_num_groups": 4,
            "latent_channels": 4,
            "num_vq_embeddings": 16,
            "vq_embed_dim": 4,
            "down_block_types": ("DownEncoderBlock2D", "DownEncoderBlock2D"),
            "up_block_types": ("UpDecoderBlock2D", "UpDecoderBlock2D"),
        },
    ),
    (
        "Transformer2DModel",
        "Transformer2DModel",
        {
            "in_channels": 8,
            "norm_num_groups": 4,
            "num_attention_heads": 2,
            "attention_head_dim": 4,
            "cross_attention_dim": 12,
            "num_layers": 1,
        },
    ),
    (
        "SanaTransformer2DModel",
        "SanaTransformer2DModel",
        {
            "in_channels": 4,
            "out_channels": 4,
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "num_layers": 1,
            "num_cross_attention_heads": 2,
            "cross_attention_head_dim": 8,
            "cross_attention_dim": 16,
            "caption_channels": 12,
            "mlp_ratio": 2.0,
            "sample_size": 8,
            "patch_size": 1,
        },
    ),
    (
        "AuraFlowTransformer2DModel",
        "AuraFlowTransformer2DModel",
        {
            "sample_size": 8,
            "patch_size": 2,
            "in_channels": 4,
            "num_mmdit_layers": 1,
            "num_single_dit_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 12,
            "caption_projection_dim": 16,
            "out_channels": 4,
            "pos_embed_max_size": 1024,  # a 32 x 32 patch grid: both size sets fit
        },
    ),
    (
        "UNet2DConditionModel (SD2: linear projection, heads per block)",
        "UNet2DConditionModel",
        {
            **UNET_CONFIG,
            "use_linear_projection": True,
            "attention_head_dim": (2, 4),
            "upcast_attention": True,
        },
    ),
    (
        "SD3Transformer2DModel (SD3.5: dual attention, qk norm)",
        "SD3Transformer2DModel",
        {
            "sample_size": 8,
            "patch_size": 2,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 2,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 12,
            "caption_projection_dim": 16,
            "pooled_projection_dim": 10,
            "pos_embed_max_size": 16,
            "dual_attention_layers": (0,),
            "qk_norm": "rms_norm",
        },
    ),
    (
        "FluxTransformer2DModel (guidance embeds)",
        "FluxTransformer2DModel",
        {
            "patch_size": 1,
            "in_channels": 8,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 12,
            "pooled_projection_dim": 10,
            "guidance_embeds": True,
            "axes_dims_rope": (2, 2, 4),
        },
    ),
    (
        "AsymmetricAutoencoderKL",
        "AsymmetricAutoencoderKL",
        {
            "in_channels": 3,
            "out_channels": 3,
            "latent_channels": 4,
            "norm_num_groups": 4,
            "down_block_out_channels": (8, 16),
            "up_block_out_channels": (8, 16),
            "layers_per_down_block": 1,
            "layers_per_up_block": 1,
            "down_block_types": ("DownEncoderBlock2D", "DownEncoderBlock2D"),
            "up_block_types": ("UpDecoderBlock2D", "UpDecoderBlock2D"),
        },
    ),
]


def _all_configs() -> list[tuple[str, str, dict[str, Any]]]:
    from mobius.testing.diffusers_configs_allegro import ALLEGRO_CONFIGS
    from mobius.testing.diffusers_configs_any import ANY_CONFIGS
    from mobius.testing.diffusers_configs_anyflow_far import FAR_CONFIGS
    from mobius.testing.diffusers_configs_audio import AUDIO_CONFIGS
    from mobius.testing.diffusers_configs_cosmos3 import COSMOS3_CONFIGS
    from mobius.testing.diffusers_configs_dltx import DLTX_CONFIGS
    from mobius.testing.diffusers_configs_glm import GLM_CONFIGS
    from mobius.testing.diffusers_configs_grid import GRID_CONFIGS
    from mobius.testing.diffusers_configs_hunyuan import HUNYUAN_CONFIGS
    from mobius.testing.diffusers_configs_k6sr import K6SR_CONFIGS
    from mobius.testing.diffusers_configs_lists import LIST_CONFIGS
    from mobius.testing.diffusers_configs_more import MORE_CONFIGS
    from mobius.testing.diffusers_configs_shaped import SHAPED_CONFIGS
    from mobius.testing.diffusers_configs_structured import STRUCTURED_CONFIGS
    from mobius.testing.diffusers_configs_unid import UNID_CONFIGS
    from mobius.testing.diffusers_configs_wana import WANA_CONFIGS
    from mobius.testing.diffusers_configs_wana2 import WANA2_CONFIGS

    return (
        SMALL_CONFIGS
        + MORE_CONFIGS
        + ANY_CONFIGS
        + SHAPED_CONFIGS
        + AUDIO_CONFIGS
        + STRUCTURED_CONFIGS
        + GRID_CONFIGS
        + LIST_CONFIGS
        + HUNYUAN_CONFIGS
        + DLTX_CONFIGS
        + K6SR_CONFIGS
        + GLM_CONFIGS
        + UNID_CONFIGS
        + WANA_CONFIGS
        + WANA2_CONFIGS
        + FAR_CONFIGS
        + COSMOS3_CONFIGS
        + ALLEGRO_CONFIGS
    )


ALL_CONFIGS = _all_configs()
