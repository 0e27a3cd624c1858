"""Small configs for LTX-2's diffusion video decoder (a decoder that samples, its neighborhood
attention dense under a window mask: ``mobius/diffusers/overrides/ltx2_decoder.py``)."""

from __future__ import annotations

from typing import Any

# every upsampling stride 1: the dense attention's scores grow with the square of the stage-5
# grid, which each stride multiplies (the second size set's grid is cut for this class too:
# diffusers_feeds.SMALL_GRIDS); kernels of 3 frames and 3 or 5 rows and columns, smaller than
# every grid fed, so the windows shift inward at the borders
LTX2_DECODER = {
    "out_channels": 3, "latent_channels": 4, "patch_size": 2, "decoder_head_dim": 8,
    "decoder_stage_channels": (16, 16, 16, 16, 8), "decoder_stage_depths": (1, 1, 1, 1, 1),
    "decoder_stage_kernels": ((3, 3, 3), (3, 5, 5), (3, 3, 3), (3, 5, 3)),
    "decoder_upsample_strides": ((1, 1, 1),) * 4,
    "decoder_upsample_channel_reductions": (1, 1, 1, 2),
    "decoder_stage5_kernel": (3, 5, 5), "decoder_t_emb_dim": 16,
    "spatial_compression_ratio": 2, "temporal_compression_ratio": 1,
}  # fmt: skip

# SANA-WM's refiner: LTX-2's transformer config (its video stream only runs), split rotary
# tables in the second entry
SANA_WM_REFINER = {
    "in_channels": 8, "out_channels": 8, "num_attention_heads": 2, "attention_head_dim": 8,
    "cross_attention_dim": 16, "audio_in_channels": 4, "audio_out_channels": 4,
    "audio_num_attention_heads": 2, "audio_attention_head_dim": 8,
    "audio_cross_attention_dim": 16, "num_layers": 1, "caption_channels": 12,
}  # fmt: skip

DLTX_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("LTX2VideoDiffusionDecoderModel", "LTX2VideoDiffusionDecoderModel", LTX2_DECODER),
    # its loop count is the config's decoder_num_inference_steps (a Python int: one graph per
    # count); 3 velocity steps take the Euler updates the shipped single x0 step skips
    (
        "LTX2VideoDiffusionDecoderModel (3 v steps)",
        "LTX2VideoDiffusionDecoderModel",
        {**LTX2_DECODER, "decoder_num_inference_steps": 3, "decoder_model_output_type": "v"},
    ),
    ("SanaWMLTX2RefinerTransformer3DModel", "SanaWMLTX2RefinerTransformer3DModel", SANA_WM_REFINER),
    (
        "SanaWMLTX2RefinerTransformer3DModel (split rotary)",
        "SanaWMLTX2RefinerTransformer3DModel",
        {**SANA_WM_REFINER, "rope_type": "split"},
    ),
]
