"""The tiny causal LM of any model type that ``AutoModelForCausalLM`` maps, as the sweep builds it.

``tiny_causal_lm(model_type)`` takes ``tiny_config_for(model_type)`` and builds the class that
``AutoModelForCausalLM`` maps the type to, with eager attention and every parameter randomised.
Two things the config alone does not settle:

- encoder families behind ``AutoModelForCausalLM`` (BERT, RoBERTa, ...): their ``*ForCausalLM`` /
  ``*LMHeadModel`` is meant for a decoder config (``is_decoder=True``, causal self-attention), as
  their causal-LM checkpoints have; the type's defaults say encoder. ``is_decoder=False`` keeps
  the bidirectional model (it converts without a KV cache).
- composite types whose causal LM is built from a sub-config other than ``text_config`` (MusicGen's
  ``decoder``), which transformers' auto class does not pick by itself.
"""

from __future__ import annotations

from typing import Any

from mobius.testing.configs import tiny_config_for


def causal_lm_class(config: Any) -> type:
    """The ``*ForCausalLM`` class that ``AutoModelForCausalLM`` maps ``config``'s type to."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]


def causal_lm_config(config: Any) -> Any:
    """The config that the causal LM of ``config``'s type is built from: the sub-config whose class
    is the model class's ``config_class`` where that differs (MusicGen's ``decoder``), else
    ``config`` itself (transformers handles ``text_config`` by itself)."""
    wanted = getattr(causal_lm_class(config), "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config
    for key in getattr(config, "sub_configs", {}):
        sub = getattr(config, key, None)
        if type(sub) is wanted:
            return sub
    return config


def tiny_causal_lm(model_type: str, *, is_decoder: bool = True, seed: int = 0, **overrides: Any):
    """(model, config): the randomised tiny causal LM of ``model_type`` and the config it was built
    from (what ``save_pretrained`` writes). ``is_decoder`` applies to encoder families only."""
    import torch
    from transformers import AutoModelForCausalLM

    from mobius.testing.tiny import randomize

    composite = tiny_config_for(model_type, **overrides)
    config = causal_lm_config(composite)
    if getattr(config, "is_decoder", None) is False and not config.is_encoder_decoder:
        config.is_decoder = is_decoder
    torch.manual_seed(seed)
    if config is composite:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    else:
        model = causal_lm_class(composite)._from_config(config, attn_implementation="eager")
    return randomize(model.float().eval(), seed=seed), config


# DeepSeek-V4 with HCA windows of 8 tokens (the default 128 is longer than any test length) and
# an indexer top-k of 3, so short prompts cover no window, one, several, and more visible windows
# than the indexer keeps
DEEPSEEK_V4_SMALL_WINDOWS = {
    "index_topk": 3,
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
}


def blt_with_varied_patches() -> tuple[Any, Any]:
    """The tiny BLT with its entropy threshold between two of its entropies on a 30-byte prompt,
    so that patches have different lengths and the two rows different patch counts (the tiny
    config's threshold lies below every entropy of a random model: one byte per patch)."""
    import torch

    from mobius.testing.parity import decoder_inputs

    model, config = tiny_causal_lm("blt")
    ids = decoder_inputs(config.vocab_size, length=30)["input_ids"]
    with torch.no_grad():
        entropies = model.model.patcher(ids, patch_size=config.patch_size, threshold=0.0)[0]
    ranked = entropies[:, 1:].flatten().sort().values
    middle = len(ranked) // 2
    config.patching_threshold = float(ranked[middle] + ranked[middle + 1]) / 2
    return model, config
