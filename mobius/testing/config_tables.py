"""The values ``configs.tiny_config_for`` gives: tiny sizes by field name, and the overrides some
families need (each with a comment saying why)."""

from __future__ import annotations

from typing import Any

HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
VOCAB = 256
EXPERTS = 4
TOP_K = 2
INTERMEDIATE = 128
MOE_INTERMEDIATE = 32

# Field names (across families) -> the tiny value. A field is only set where the class has it and
# its default is not None (None usually means "derive it from the others").
SIZES: dict[str, int] = {
    # width
    **dict.fromkeys(
        ["hidden_size", "n_embd", "n_embed", "d_model", "embed_dim", "emb_dim", "model_dim"],
        HIDDEN,
    ),
    "word_embed_proj_dim": HIDDEN,  # OPT: projection to the embedding width
    "hidden_size_global": HIDDEN,  # BLT: the global transformer's width, seen from its sub-configs
    "embedding_size": HIDDEN,  # ELECTRA/ALBERT-style factorised embeddings
    # depth
    **dict.fromkeys(
        [
            "num_hidden_layers",
            "n_layer",
            "n_layers",
            "num_layers",
            "decoder_layers",
            "encoder_layers",
            "num_decoder_layers",
            "num_encoder_layers",
        ],
        LAYERS,
    ),
    # attention heads
    **dict.fromkeys(
        [
            "num_attention_heads",
            "n_head",
            "n_heads",
            "decoder_attention_heads",
            "encoder_attention_heads",
            "num_heads",
        ],
        HEADS,
    ),
    **dict.fromkeys(
        ["num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"], KV_HEADS
    ),
    **dict.fromkeys(["head_dim", "kv_channels", "attention_head_dim", "d_head"], HEAD_DIM),
    # feed-forward
    **dict.fromkeys(
        [
            "intermediate_size",
            "ffn_dim",
            "n_inner",
            "d_ff",
            "decoder_ffn_dim",
            "encoder_ffn_dim",
            "ffn_hidden_size",
            "dim_ff",
            "d_inner",
            "inner_hidden_size",
        ],
        INTERMEDIATE,
    ),
    **dict.fromkeys(
        ["moe_intermediate_size", "expert_intermediate_size", "moe_ffn_hidden_size"],
        MOE_INTERMEDIATE,
    ),
    **dict.fromkeys(
        [
            "shared_expert_intermediate_size",
            "moe_shared_expert_intermediate_size",
            "shared_intermediate_size",
        ],
        2 * MOE_INTERMEDIATE,
    ),
    # experts
    **dict.fromkeys(
        [
            "num_experts",
            "num_local_experts",
            "n_routed_experts",
            "moe_num_experts",
            "num_routed_experts",
        ],
        EXPERTS,
    ),
    **dict.fromkeys(
        [
            "num_experts_per_tok",
            "num_experts_per_token",
            "moe_topk",
            "moe_k",
            "num_selected_experts",
            "top_k_experts",
        ],
        TOP_K,
    ),
    # multi-head latent attention (DeepSeek-V2/V3 and relatives): small low-rank projections
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "qk_head_dim": 24,  # qk_nope_head_dim + qk_rope_head_dim
    # group-limited routing: 2 groups of 2 experts, so the group choice matters
    "n_group": 2,
    "num_expert_group": 2,
    "topk_group": 1,
    # vocab
    "vocab_size": VOCAB,
    # sliding windows: shorter than the test sequences, so that the window is exercised
    "sliding_window": 4,
    # state-space / linear-attention sizes
    "state_size": 8,
    "ssm_state_size": 8,
    "mamba_d_state": 8,
    "time_step_rank": 8,
    "mamba_dt_rank": 8,
    "linear_key_head_dim": HEAD_DIM,
    "linear_value_head_dim": HEAD_DIM,
    "linear_num_key_heads": KV_HEADS,
    "linear_num_value_heads": HEADS,
    "mamba_head_dim": HEAD_DIM,
    "linear_head_dim": HEAD_DIM,
    "linear_num_heads": HEADS,
    # Gemma-3n per-layer input embeddings
    "vocab_size_per_layer_input": VOCAB,
    "hidden_size_per_layer_input": HEAD_DIM,
    "mamba_num_heads": 8,  # 8 heads x 16 = expand (2) x hidden (64)
    "mamba_n_heads": 8,
    "mamba_d_head": HEAD_DIM,
    "mamba_chunk_size": 4,
    "mamba_d_ssm": 2 * HIDDEN,  # expand x hidden (Falcon-H1)
    "n_groups": 1,
    "mamba_n_groups": 1,
    "rotary_dim": 8,  # GPT-J / CodeGen: at most head_dim (16)
    "chunk_size": 4,  # shorter than the sequences, so chunked scans cross a chunk boundary
    # vision towers in multimodal checkpoints
    "image_size": 32,
    "patch_size": 8,
    "vision_output_dim": HIDDEN,
    "projection_dim": HIDDEN,
}

# Per model type: values applied after the general rules (nested sub-configs as dicts).
OVERRIDES: dict[str, dict[str, Any]] = {
    # ALIGN compares the text projection with the vision tower's pooled output, which has no
    # projection: the two widths must agree (640 with the default EfficientNet tower)
    "align": {"projection_dim": 640},
    # layout models: LiLT's four box embeddings are hidden // 6 wide and concatenated back to
    # 6 of them (the width must divide by 6); LayoutLMv3 concatenates 4 coordinate and 2 shape
    # embeddings to the hidden width
    "lilt": {"hidden_size": 96},
    "layoutlmv3": {"coordinate_size": 12, "shape_size": 8},
    # ESM masks its token dropout by the padding id, which its defaults leave None (real
    # checkpoints use 1)
    "esm": {"pad_token_id": 1},
    # ShieldGemma2 scores the "Yes"/"No" tokens of Gemma 3's vocabulary (ids 10784 and 3771 when
    # its config does not say): two ids inside the tiny vocabulary
    "shieldgemma2": {"yes_token_index": 10, "no_token_index": 11},
    # Mamba-2: num_heads * head_dim must equal expand * hidden_size (= 128)
    "mamba2": {"num_heads": 8, "head_dim": 16},
    # ZAYA validates that it routes each token to exactly one expert
    "zaya": {"num_experts_per_tok": 1},
    # Dory: input + recurrent + output layers must add up to num_hidden_layers; one of each. Its
    # config counts attention and MLP blocks separately (each layer is two), hence 6 and 2s.
    "dory": {
        "num_hidden_layers": 6,
        "n_input_layers": 2,
        "n_recurrent_layers": 2,
        "n_output_layers": 2,
        "layer_types": [
            "sliding_attention",
            "mlp",
            "full_attention",
            "mlp",
            "sliding_attention",
            "mlp",
        ],
    },
    # dots3: the sliding-window layers' head_dim must equal their own query/key head dim:
    # qk_nope_head_dim, a per-layer override kept distinct from the indexed layers' 16 (so 32),
    # + qk_rope_head_dim 8 (and its vision and audio adapters must project to the text width)
    "dots3_note": {
        "text_config": {"head_dim": 40},
        "vision_config": {"adapter_out_dim": HIDDEN},
        "audio_config": {"adapter_out_dim": HIDDEN},
    },
    "dots3_note_text": {"head_dim": 40},
    # Cohere-Compass: rope_parameters is keyed by layer type and empty by default
    "cohere_compass_text": {
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        }
    },
    # Gemma-3n: the last num_kv_shared_layers layers reuse earlier layers' KV; with 2 layers none
    "gemma3n_text": {"num_kv_shared_layers": 0},
    "gemma3n": {"text_config": {"num_kv_shared_layers": 0}},
    # Gemma-4 assistant: validated to have no per-layer input embeddings
    "gemma4_assistant": {
        "text_config": {
            "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 0,
            "enable_moe_block": False,
            "use_double_wide_mlp": False,
            "num_kv_shared_layers": LAYERS,
        }
    },
    # Bamba: no attention layer by default (attn_layer_indices None); make layer 1 attention
    "bamba": {"attn_layer_indices": [1]},
    # Granite-MoE-hybrid: all layers Mamba by default; one Mamba and one attention layer
    "granitemoehybrid": {"layer_types": ["linear_attention", "attention"]},
    # RecurrentGemma: block_types is a repeating pattern of 3; with 2 layers keep one of each kind
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    # LFM2-MoE: layer_types defaults to None, which the model cannot build from
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    # Zamba: the shared transformer block is tied across hybrid layers, so it needs at least two
    "zamba": {
        "num_hidden_layers": 3,
        "layers_block_type": ["linear_attention", "hybrid", "hybrid"],
    },
    # xLSTM: HF's recurrent kernels assume the qk head dim equals the v head dim
    "xlstm": {"qk_dim_factor": 1.0},
    # Qwen4-Exp: the QSA indexer has no usable defaults (all None). 16 indexer heads, not 2: a
    # block scores exactly 0 when every head's relu is 0 (about 1 block in 4 with 2 heads), and
    # which of several equal scores torch.topk keeps is unspecified (CPU: std::nth_element's
    # order), so the reference itself would pick arbitrarily; real checkpoints have dozens of heads
    "qwen4_exp": {
        "text_config": {
            "indexer_n_heads": 16,
            "indexer_kv_heads": 1,
            "indexer_head_dim": HEAD_DIM,
            "indexer_budget": 4,
            "indexer_compress_ratio": 2,
        }
    },
    "qwen4_exp_text": {
        "indexer_n_heads": 16,
        "indexer_kv_heads": 1,
        "indexer_head_dim": HEAD_DIM,
        "indexer_budget": 4,
        "indexer_compress_ratio": 2,
    },
    # Reformer: the LM head model must be a decoder; 2 layers of its local/LSH pattern
    # (axial position embeddings: the dims add up to hidden, the shape multiplies to max positions)
    "reformer": {
        "is_decoder": True,
        "attn_layers": ["local", "lsh"],
        "axial_pos_shape": [4, 8],
        "axial_pos_embds_dim": [32, 32],
        "max_position_embeddings": 32,
    },
    # DBRX: transformers' DbrxAttention reads attn_config.rope_theta, which DbrxAttentionConfig no
    # longer declares (rope moved to the top-level rope_parameters); released DBRX config.json files
    # still carry it in attn_config, so the tiny config does too
    # (and it clamps q/k/v to clip_qkv unconditionally, which fails for the default None; released
    # DBRX uses 8)
    "dbrx": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0}},
    # MusicGen (and Melody): the causal LM is the decoder, which takes one row per codebook
    # (batch x num_codebooks rows); one codebook keeps the tests' batch of token rows as it is
    "musicgen": {"decoder": {"num_codebooks": 1}},
    "musicgen_melody": {"decoder": {"num_codebooks": 1}},
    # BLT: transformers' BltModel builds its DynamicCache from the top-level config, which has no
    # num_hidden_layers, so a forward with use_cache fails for any BLT config; mobius traces with
    # use_cache=False, and so the tiny config defaults to it
    "blt": {"use_cache": False},
    # X-MOD: the language adapters need a default language to run without a `lang_ids` input
    "xmod": {"default_language": "en_XX"},
    # HRM: num_hidden_layers is the cache size, num_layers_per_stack x H_cycles x (L_cycles + 1)
    "hrm_text": {
        "num_layers_per_stack": 1,
        "H_cycles": 1,
        "L_cycles": 1,
        "L_bp_cycles": [1],
        "num_hidden_layers": 2,
    },
}

# Sizes that some config classes leave as None by default and then cannot build from (their
# defaults are derived elsewhere, or missing): set even where the default is None.
FILL_NONE = {
    # ESM, wav2vec2-bert/-conformer leave it to the user (their CTC and LM heads need one)
    "vocab_size": VOCAB,
    "head_dim": HEAD_DIM,
    "num_key_value_heads": KV_HEADS,
    "n_routed_experts": EXPERTS,
    "num_experts_per_tok": TOP_K,
    "n_shared_experts": 1,
}
# Number of leading dense layers before the MoE ones: at most 1, so that layer 2 is MoE.
DENSE_PREFIX = ("num_dense_layers", "first_k_dense_replace", "first_dense_layers")

# Compound-scaling depth multiplier (EfficientNet, ALIGN's vision tower): the base network's
# depth, not 3.1x as many random blocks (which drive activations to 1e7). The width multiplier
# stays: other sizes (the last batch norm's width) are derived from it in the config's defaults.
COMPOUND_SCALING = {"depth_coefficient": 1.0}
