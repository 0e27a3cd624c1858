"""Per-type settings for tiny VLMs beyond ``VLM_OVERRIDES`` (``mobius.testing.vlm``), each with
its reason."""

from __future__ import annotations

from typing import Any

MORE_VLM_OVERRIDES: dict[str, dict[str, Any]] = {
    # the default mrope_section (sized for the real rotary width) fails the config's own check
    # that it sums to half the shrunk head dimension (16 here)
    "cosmos3_edge": {
        "text_config": {
            "head_dim": 16,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e4,
                "mrope_section": [4, 2, 2],
            },
        }
    },
    # the default mrope_section fails the config's check against the shrunk rotary head; and
    # shrinking the vocabulary puts the image token (120120) on the text config's pad token
    # (120002): the padded text-only row would count as image tokens. Distinct ids below
    "hy_v4_vl": {
        "image_token_id": 250,
        "video_token_id": 249,
        "text_config": {
            "qk_rope_head_dim": 16,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e4,
                "mrope_section": [4, 2, 2],
            },
        },
    },
    # Ernie 4.5 VL interleaves the height and width sections of its rotary (stacked pairwise):
    # they must be equal ([22, 22, 20] in the real config); the split mobius.testing.vlm makes
    # for a 16-wide head is [4, 2, 2]
    "ernie4_5_vl_moe": {
        "text_config": {
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5e5,
                "mrope_section": [3, 3, 2],
            },
        }
    },
    # Aria's projector picks its number of queries by the tower's patch count from this table
    # (1225 and 4900 patches for the real 490- and 980-pixel images); the tiny tower makes 16
    "aria": {"projector_patch_to_query_dict": {16: 4}},
    # BLIP-2's config class leaves image_token_index unset (the legacy layout, query outputs
    # prepended); every current checkpoint (Salesforce/blip2-*) sets it to the last id of its
    # extended vocabulary, and the processor repeats it num_query_tokens times. Four queries
    # keep the prompt short.
    "blip-2": {"image_token_index": 255, "num_query_tokens": 4},
    # InstructBLIP-Video, like BLIP-2: the config class leaves its placeholder (the video token)
    # unset, which every checkpoint sets; each frame makes num_query_tokens features
    "instructblipvideo": {"video_token_index": 250, "num_query_tokens": 4},
    # Gemma 4 unified embeds merged patches straight to mm_embed_dim and output_proj_dims (3840
    # each in the real config, not shrunk with the other widths)
    "gemma4_unified": {"vision_config": {"mm_embed_dim": 64, "output_proj_dims": 64}},
    # the Kosmos text configs name their depth `layers` (24), which the shrinking does not know;
    # Kosmos-2.5 also resamples every image to latent_query_num features (2048 in the real
    # config, the processor's placeholders likewise): 16 keep the prompt short
    "kosmos-2": {"text_config": {"layers": 2}},
    "kosmos-2.5": {"latent_query_num": 16, "text_config": {"layers": 2}},
    # Kimi-K2.5's projector norms the merged vision tokens with projection_hidden_size features,
    # the vision width (1152 in the real config); the shrunk tower is 64 wide
    "kimi_k25": {"projection_hidden_size": 64},
    # MuseGlimmer's adapter reads out_hidden_size = vision width * merge_size**2 features (6144 =
    # 1536 * 4 in the real config); the shrunk tower gives 64 * 4. A narrower adapter keeps it small
    "muse_glimmer": {"out_hidden_size": 256, "projector_hidden_size": 128},
    # shrinking the vocabulary to 256 clamps LFM3-VL's special ids onto each other: the image
    # token (125030 in the real config) would land on the pad token (124893); distinct ids below
    "lfm3_vl": {"image_token_id": 250, "video_token_id": 249},
    # the same clamping puts dots.ocr-3's image token (151660) on its pad token (151659): the
    # padded text-only row of the parity prompt then counts as image tokens in HF's own forward
    "dots3_note": {"image_token_id": 250, "video_token_id": 249, "audio_token_id": 248},
    # Llama 4's pixel-shuffle MLP reads intermediate_size = hidden_size / ratio**2 features and
    # projects to projector_input_dim = projector_output_dim = vision_output_dim (5632 = 1408 * 4
    # and 4096 in the real config); shrinking the widths one by one breaks those identities
    "llama4": {
        "vision_config": {
            "intermediate_size": 256,
            "projector_input_dim": 64,
            "projector_output_dim": 64,
            "vision_output_dim": 64,
        }
    },
    # Step3p7's text model always builds a sliding-window mask (the real config's layers mix
    # sliding and full attention); the shrunk config leaves sliding_window unset
    "step3p7": {
        "text_config": {"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]}
    },
    # Unlimited-OCR's CLIP encoder reads SAM's features, downsampled 4x: its position table
    # (image_size / patch_size per side) must match SAM's image_size / patch_size / 4, as the
    # real 1024/16 -> 16 and 224/14 -> 16 do; shrunk separately they disagree. 64/8/4 = 16/8 = 2.
    # Its embedding takes SAM's last downsample channels as the patch embeddings (1024 = the CLIP
    # width in the real config): the shrunk width, 64. Its eager attention does not repeat
    # key/value heads: as many as the query heads (10 and 10 in the real config)
    "unlimited_ocr": {
        "text_config": {"num_key_value_heads": 4},
        "vision_config": {
            "sam_config": {
                "image_size": 64,
                "global_attn_indexes": [1],
                "downsample_channels": [32, 64],
            },
            "encoder_config": {"image_size": 16},
        },
    },
}
