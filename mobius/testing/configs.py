"""A tiny, valid config for any transformers model type, derived from the config class's defaults.

``tiny_config_for(model_type)`` starts from the defaults of the family's config class and shrinks
every size it recognises: hidden 64, 2 layers, 4 attention heads and 2 KV heads (where the family
has KV heads), vocab 256 with every special token id inside it, 4 experts with top-2, small
intermediate sizes. Per-layer lists (layer types, window patterns, ...) are cut to 2 layers,
keeping both kinds of layer where there were several; index lists (e.g. which layers are
attention) are kept inside the 2 layers. Nested sub-configs (``text_config``, ``vision_config``,
...) are shrunk the same way. Families that need values the general rules cannot derive have an
entry in ``OVERRIDES``, with a comment saying why.

``mobius/testing/tiny.py`` keeps its hand-written table for the families its tests use; this is the
general generator that the coverage sweep (``benchmarks/coverage.py``) relies on.
"""

from __future__ import annotations

import copy
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
    # dots3: the sliding-window layers use plain attention whose head_dim must equal the MLA
    # query/key head dim (qk_nope_head_dim + qk_rope_head_dim)
    # (and its vision and audio adapters must project to the text model's width)
    "dots3_note": {
        "text_config": {"head_dim": 24},
        "vision_config": {"adapter_out_dim": HIDDEN},
        "audio_config": {"adapter_out_dim": HIDDEN},
    },
    "dots3_note_text": {"head_dim": 24},
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
    # Qwen4-Exp: the QSA indexer has no usable defaults (all None)
    "qwen4_exp": {
        "text_config": {
            "indexer_n_heads": 2,
            "indexer_kv_heads": 1,
            "indexer_head_dim": HEAD_DIM,
            "indexer_budget": 4,
            "indexer_compress_ratio": 2,
        }
    },
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
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
    "head_dim": HEAD_DIM,
    "num_key_value_heads": KV_HEADS,
    "n_routed_experts": EXPERTS,
    "num_experts_per_tok": TOP_K,
    "n_shared_experts": 1,
}
# Number of leading dense layers before the MoE ones: at most 1, so that layer 2 is MoE.
DENSE_PREFIX = ("num_dense_layers", "first_k_dense_replace", "first_dense_layers")

_SUBCONFIG_SUFFIX = "_config"
_NOT_WIDTHS = ("position", "window", "vocab", "token", "chunk", "length", "max_", "batch")
# Keys whose list values are indexed by layer (lists of layer indices) rather than per layer.
_INDEX_LIST_HINTS = ("layers", "layer_ids", "layer_indices", "layer_idx", "idxs", "indices")


def _distinct_two(values: list) -> list:
    """Two per-layer values, keeping two different kinds when the list has several."""
    seen: list = []
    for value in values:
        if value not in seen:
            seen.append(value)
    if len(seen) == 1:
        return [seen[0]] * LAYERS
    # keep the order in which the kinds first appear, but end with the last layer's kind where
    # that differs (hybrids often end on full attention)
    first, last = values[0], values[-1]
    if first != last:
        return [first, last]
    return seen[:LAYERS]


def _shrink_token_ids(values: dict[str, Any]) -> None:
    """Move every special token id (and lists of them) inside the tiny vocab, keeping distinct ids
    distinct."""
    taken: dict[int, int] = {}
    free = iter(range(VOCAB - 1, 0, -1))

    def remap(token: Any) -> Any:
        if not isinstance(token, int) or isinstance(token, bool) or 0 <= token < VOCAB:
            return token
        if token not in taken:
            taken[token] = next(free)
        return taken[token]

    for key, value in list(values.items()):
        if not (key.endswith("_token_id") or key.endswith("_token_ids") or key.endswith("_index")):
            continue
        if key.endswith("_index") and "token" not in key:
            continue
        if isinstance(value, list):
            values[key] = [remap(v) for v in value]
        else:
            values[key] = remap(value)


def _shrink(values: dict[str, Any], sub_defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Shrink one level of config values (a ``to_dict()``), recursing into sub-configs."""
    values = copy.deepcopy(values)
    old_layers = next(
        (
            values[k]
            for k in ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers")
            if isinstance(values.get(k), int)
        ),
        None,
    )
    old_hidden = next(
        (values[k] for k in ("hidden_size", "n_embd", "d_model") if isinstance(values.get(k), int)),
        None,
    )
    old_ffn = values.get("intermediate_size")
    for key, value in list(values.items()):
        if (
            key not in SIZES
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value >= 256
            and any(h in key for h in ("dim", "size", "hidden", "width"))
            and not any(x in key for x in _NOT_WIDTHS)
        ):
            # another name for the model width (e.g. adapter_in_dim, lru_width): keep it equal
            if value == old_hidden:
                values[key] = HIDDEN
                continue
            if value == old_ffn:
                values[key] = INTERMEDIATE
                continue
        if isinstance(value, dict) and (key.endswith(_SUBCONFIG_SUFFIX) or "model_type" in value):
            values[key] = _shrink(value)
            continue
        if key in SIZES and isinstance(value, int) and not isinstance(value, bool):
            values[key] = SIZES[key]
            continue
        if key in SIZES and isinstance(value, list) and all(isinstance(v, int) for v in value):
            values[key] = [SIZES[key]] * len(value)  # per-layer sizes (e.g. Gemma-3n FFN widths)
            if old_layers and len(value) == old_layers:
                values[key] = [SIZES[key]] * LAYERS
            continue
        if (
            "vocab" in key
            and "offset" not in key  # Gemma-3n's per-modality token offsets stay distinct
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value > VOCAB
        ):
            values[key] = VOCAB  # other vocabs (unpadded_vocab_size, BLT's hash-group vocab) too
            continue
        if value is None and key in FILL_NONE:
            values[key] = FILL_NONE[key]
            continue
        if key in DENSE_PREFIX and isinstance(value, int) and value > 1:
            values[key] = 1
            continue
        if old_layers and old_layers > LAYERS:
            if isinstance(value, list) and len(value) == old_layers:
                values[key] = _distinct_two(value)  # per-layer list
            elif isinstance(value, str) and len(value) == old_layers and "pattern" in key:
                values[key] = "".join(_distinct_two(list(value)))  # e.g. "M-M*-..." patterns
            elif (
                isinstance(value, list)
                and value
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
                and any(h in key for h in _INDEX_LIST_HINTS)
            ):
                inside = sorted({v for v in value if v < LAYERS})
                values[key] = inside or [LAYERS - 1]  # keep at least one such layer
    if isinstance(values.get("qk_rope_head_dim"), int) and "head_dim" in values:
        values["head_dim"] = values["qk_rope_head_dim"]  # MLA: rotary embeddings use head_dim
    if isinstance(values.get("kv_lora_rank"), int) and "num_key_value_heads" in values:
        values["num_key_value_heads"] = HEADS  # MLA: keys and values have one head per query head
    for key, value in list(values.items()):
        # "every k-th layer from offset o" (Jamba's attention / expert layers): layer 1 of 2
        if key.endswith("_layer_period") and isinstance(value, int) and value > LAYERS:
            values[key] = LAYERS
            offset = key.replace("_period", "_offset")
            if isinstance(values.get(offset), int):
                values[offset] = 1
    if isinstance(values.get("per_layer_config"), dict):
        values["per_layer_config"] = _per_layer_dict(values["per_layer_config"])
    _shrink_token_ids(values)
    return values


def _per_layer_dict(entries: dict) -> dict:
    """Per-layer overrides keyed by layer index: keep those inside the 2 layers (at least one),
    with their sizes shrunk too."""
    inside = {k: v for k, v in entries.items() if int(k) < LAYERS}
    if not inside and entries:
        inside = {LAYERS - 1: next(iter(entries.values()))}
    return {k: _shrink(v) if isinstance(v, dict) else v for k, v in inside.items()}


def _tiny_values(model_type: str) -> dict[str, Any]:
    """The shrunk values of ``model_type``'s defaults (what a sub-config left as None gets)."""
    from transformers import CONFIG_MAPPING

    values = _shrink(_defaults(CONFIG_MAPPING[model_type]))
    _apply(values, OVERRIDES.get(model_type, {}))
    return values


def _changed(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The values that differ from the defaults (nested dicts as their changed keys), so that the
    config class still derives everything else itself."""
    out = {}
    for key, value in new.items():
        if key not in old:
            out[key] = value
        elif isinstance(value, dict) and isinstance(old[key], dict):
            if "model_type" in value:  # a sub-config class: its own defaults fill the rest
                out[key] = _changed(value, old[key])
            else:  # a plain dict (rope parameters, attention options): passed whole
                out[key] = value
        elif value != old[key]:
            out[key] = value
    return out


def tiny_config_for(model_type: str, **overrides: Any):
    """A small valid ``PretrainedConfig`` for ``model_type``, from its config class's defaults.

    ``overrides`` are applied last (nested sub-configs as dicts).
    """
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    defaults = _defaults(cls)
    for key in ("transformers_version", "_name_or_path", "architectures", "model_type"):
        defaults.pop(key, None)
    values = _shrink(defaults)
    # sub-configs that default to None (the model then cannot be built, or gets full-size
    # defaults): the tiny values of their own model type
    for key, spec in getattr(cls, "sub_configs_defaults", {}).items():
        sub_type = getattr(spec, "model_type", None)
        if values.get(key) is None and sub_type in CONFIG_MAPPING:
            values[key] = _tiny_values(sub_type)
    _apply(values, OVERRIDES.get(model_type, {}))
    _apply(values, overrides)
    return cls(**_changed(values, defaults))


def _defaults(cls) -> dict[str, Any]:
    """The class's default values; from its dataclass fields where its defaults do not validate."""
    import dataclasses

    try:
        return cls().to_dict()
    except Exception:  # e.g. Gemma-4 assistant: the default text config fails its own validation
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out


def _apply(values: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            _apply(values[key], value)
        else:
            values[key] = value
