"""Small configs for Wan Animate's transformer (``WanAnimateTransformer3DModel``): a Wan block
with a face adapter after it (``inject_face_latents_blocks`` 1), CLIP image tokens, pose latents
and a face video at a 16-pixel motion encoder (two stride-2 residual blocks, 8 channels each, so
that the default table of 512 channels at 16 pixels is not built); and its checkpoints' image
cross-attention.
"""

from __future__ import annotations

from typing import Any

# fmt: off
WAN_ANIMATE = {
    "patch_size": (1, 2, 2), "num_attention_heads": 2, "attention_head_dim": 8,
    "in_channels": 12, "latent_channels": 4, "out_channels": 4, "text_dim": 12, "freq_dim": 16,
    "ffn_dim": 32, "num_layers": 1, "image_dim": 10,
    "motion_encoder_channel_sizes": {"16": 8, "8": 8, "4": 8}, "motion_encoder_size": 16,
    "motion_style_dim": 8, "motion_dim": 4, "motion_encoder_dim": 16,
    "face_encoder_hidden_dim": 8, "face_encoder_num_heads": 2, "inject_face_latents_blocks": 1,
    "motion_encoder_batch_size": 8,
}

WANA_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("WanAnimateTransformer3DModel", "WanAnimateTransformer3DModel", WAN_ANIMATE),
    # its checkpoints' image cross-attention (its own key and value projections of the image
    # tokens, the prompt padded to 512), and a face adapter after every other block of two
    ("WanAnimateTransformer3DModel (image cross-attention)", "WanAnimateTransformer3DModel",
     WAN_ANIMATE | {"added_kv_proj_dim": 16, "num_layers": 2, "inject_face_latents_blocks": 2}),
]
# fmt: on
