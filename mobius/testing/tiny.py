"""Tiny HF checkpoints with every parameter randomised (biases and norm weights included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

COMMON = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256}

# Per model type: config fields on top of COMMON, and a comment on why where it is not obvious.
TINY_CONFIGS: dict[str, dict[str, Any]] = {  # fmt: skip
    "llama": {"intermediate_size": 128, "num_key_value_heads": 2},
    "qwen2": {"intermediate_size": 128, "num_key_value_heads": 2},
    "mistral": {"intermediate_size": 128, "num_key_value_heads": 2, "sliding_window": 4},
    "phi3": {"intermediate_size": 128, "num_key_value_heads": 2, "pad_token_id": 0},
    "gemma": {"intermediate_size": 128, "num_key_value_heads": 2, "head_dim": 16},
    "gemma2": {
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "sliding_window": 4,
    },
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128},
    "gpt_neox": {"intermediate_size": 128},
    "opt": {
        "ffn_dim": 128,
        "word_embed_proj_dim": 64,
        "max_position_embeddings": 128,
        "pad_token_id": 1,
    },
    "falcon": {},
    "bloom": {"n_layer": 2, "n_head": 4},
    "phi": {"intermediate_size": 128},
    "bert": {"intermediate_size": 128, "max_position_embeddings": 128},
    "roberta": {"intermediate_size": 128, "max_position_embeddings": 130, "pad_token_id": 1},
    "qwen3": {"intermediate_size": 128, "num_key_value_heads": 2, "head_dim": 16},
    "gemma3_text": {
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    # non-default multipliers, so that a dropped one shows
    "granite": {
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "embedding_multiplier": 12.0,
        "logits_scaling": 8.0,
        "residual_multiplier": 0.22,
        "attention_multiplier": 0.05,
    },
    "olmo2": {"intermediate_size": 128, "num_key_value_heads": 2},
    "stablelm": {"intermediate_size": 128, "num_key_value_heads": 2},
    "gptj": {"n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8, "n_positions": 128},
    "mixtral": {
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
    },
    "qwen2_moe": {
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
    },
    "qwen3_moe": {
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
    },
    "olmoe": {
        "intermediate_size": 32,
        "num_key_value_heads": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
    },
    # MLA with small LoRA ranks; 8 experts in 2 groups so group-limited routing has a choice to make
    "deepseek_v3": {
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_key_value_heads": 4,
        "n_shared_experts": 1,
        "n_routed_experts": 8,
        "n_group": 2,
        "topk_group": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 16,
        "q_lora_rank": 32,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "qk_nope_head_dim": 16,
        "head_dim": 8,
    },
    "vit": {"intermediate_size": 128, "image_size": 32, "patch_size": 8, "vocab_size": None},
    "eurobert": {"intermediate_size": 128, "num_key_value_heads": 2, "pad_token_id": 1},
    # three small convolutions (stride 10 in all) instead of seven 512-channel ones; per-layer
    # norms, so its feature extractor returns an attention mask and the graph takes one
    "wav2vec2": {
        "intermediate_size": 128,
        "conv_dim": (32, 32, 32),
        "conv_stride": (5, 2, 1),
        "conv_kernel": (10, 3, 3),
        "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 4,
        "feat_extract_norm": "layer",
        "do_stable_layer_norm": True,
        "classifier_proj_size": 32,
    },
    # a dual encoder: the sizes live in its towers' configs
    "clip": {
        "projection_dim": 32,
        "text_config": {
            **COMMON,
            "intermediate_size": 128,
            "max_position_embeddings": 32,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        "vision_config": {**COMMON, "intermediate_size": 128, "image_size": 32, "patch_size": 8},
    },
}


def tiny_config(model_type: str, **overrides: Any):
    """A small valid config for ``model_type`` (2 layers, hidden 64, vocab 256)."""
    from transformers import AutoConfig

    values = {**COMMON, **TINY_CONFIGS.get(model_type, {}), **overrides}
    values = {k: v for k, v in values.items() if v is not None}
    for token in ("bos_token_id", "eos_token_id"):
        values.setdefault(token, 0)
    return AutoConfig.for_model(model_type, **values)


def randomize(model: torch.nn.Module, seed: int = 0, *, fan_in: bool = False) -> torch.nn.Module:
    """Give every parameter random values (norm weights away from 1), and every floating persistent
    buffer that starts constant (a router bias at 0).

    Matrices and kernels get a standard deviation of 0.3, or with ``fan_in`` of
    ``1 / sqrt(fan-in)`` (what trained layers keep: each layer roughly preserves the scale).
    Without it a deep stack with no normalisation that adapts to the data (MobileBERT's NoNorm,
    batch norms with fixed running statistics, Perceiver's cross-attention) grows activations
    to 1e3..1e6, where float32 rounding alone differs by more than 1e-4.

    A buffer that starts with varying values is a table the model derives from its config (decay
    rates, say) and reads in several consistent forms; random values would break what the model
    itself relies on, as a real checkpoint never does.
    """
    gen = torch.Generator().manual_seed(seed)
    persistent = set(model.state_dict())
    floating_buffers = [
        b
        for n, b in model.named_buffers()
        if n in persistent and b.is_floating_point() and _constant(b)
    ]
    # batch norms' running variances: random, but positive as every real checkpoint's are
    variances = [b for n, b in model.named_buffers() if n.endswith("running_var")]
    with torch.no_grad():
        for tensor in [*model.parameters(), *floating_buffers]:  # e.g. DeepSeek's router bias
            noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float32)
            scale = 0.5 if tensor.dim() <= 1 else 0.3
            if fan_in and tensor.dim() >= 2:
                scale = tensor[0].numel() ** -0.5
            start = float(tensor.flatten()[0]) if tensor.numel() and _constant(tensor) else 0.0
            if 0 < abs(start) < 0.1:
                # a learned scale that starts small because the model multiplies it by the
                # inverse (nGPT's ``sqk``, ``logit_scale``): vary it around its start, as training
                # does; order-1 values would scale activations by 1/start
                noise, scale = 1 + 0.5 * noise, start
            if any(tensor is v for v in variances):
                noise, scale = 0.5 + noise.abs(), 1.0  # a variance stays positive
            tensor.copy_((noise * scale).to(tensor.dtype))
    return model


def _constant(tensor: torch.Tensor) -> bool:
    return tensor.numel() == 0 or bool((tensor == tensor.flatten()[0]).all())


def make_checkpoint(
    model_type: str,
    directory: Path,
    *,
    auto: Any = None,
    task: str | None = None,
    seed: int = 0,
    **overrides: Any,
):
    """Build a tiny random-weight model, save it with save_pretrained, and return (model, config).

    The model class is ``auto``'s, else ``task``'s (a name in ``mobius.tasks.TASKS``), else the
    task detected for the config.
    """
    from mobius.sources.config import from_hf
    from mobius.tasks import TASKS
    from mobius.tasks.detect import detect_task

    config = tiny_config(model_type, **overrides)
    if auto is None:
        arch = from_hf(config)
        the_task = TASKS[task] if task is not None else detect_task(arch)
        auto = the_task.auto_class(arch)
    torch.manual_seed(seed)
    model = auto.from_config(config, attn_implementation="eager").eval()
    randomize(model, seed)
    model.save_pretrained(directory)
    return model, config
