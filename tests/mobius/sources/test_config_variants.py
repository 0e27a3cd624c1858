"""Config variants the family tests do not cover: rope scaling types, MQA, biases, windows, layouts.

Each builds a tiny random checkpoint, converts it, and checks prefill, a decode step on the cache,
and 24 greedy tokens against HF, on a left-padded batch of 2.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mobius
from mobius.testing.parity import OnnxCausalLM, decoder_inputs, hf_greedy, max_abs_diff
from mobius.testing.tiny import make_checkpoint

LLAMA3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}  # fmt: skip
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.1, 1.2, 1.3],
            "long_factor": [2.0, 2.3, 2.6, 2.9], "original_max_position_embeddings": 12,
            "partial_rotary_factor": 0.5}  # fmt: skip
VARIANTS = {
    # the generation below runs past each model's trained length, so every scaling switches on
    "llama-llama3-rope": ("llama", {"rope_parameters": LLAMA3}),
    "llama-linear-rope": (
        "llama",
        {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}},
    ),
    "llama-dynamic-ntk": (
        "llama",
        {
            "rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0},
            "max_position_embeddings": 16,
        },
    ),
    "llama-yarn": (
        "llama",
        {
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1e4,
                "factor": 4.0,
                "original_max_position_embeddings": 16,
            }
        },
    ),
    "llama-mqa-biases-tied": (
        "llama",
        {
            "num_key_value_heads": 1,
            "attention_bias": True,
            "mlp_bias": True,
            "tie_word_embeddings": True,
            "head_dim": 32,
        },
    ),
    "phi3-longrope-partial": ("phi3", {"rope_parameters": LONGROPE, "max_position_embeddings": 64}),
    "mistral-window-3": ("mistral", {"sliding_window": 3}),
    "qwen2-sliding-layers": (
        "qwen2",
        {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    ),
    "gemma2-no-softcap": (
        "gemma2",
        {
            "attn_logit_softcapping": None,
            "final_logit_softcapping": None,
            "query_pre_attn_scalar": 24,
        },
    ),
    "gpt_neox-sequential-partial": (
        "gpt_neox",
        {"rotary_pct": 0.5, "use_parallel_residual": False},
    ),
    "falcon-new-architecture": ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_prefill_decode_generate(name, tmp_path):
    model_type, overrides = VARIANTS[name]
    model, config = make_checkpoint(model_type, tmp_path / "ckpt", **overrides)
    out = mobius.build(tmp_path / "ckpt").save(tmp_path / "onnx")
    assert max_abs_diff(model, out, config) <= 1e-4
    lm = OnnxCausalLM(out)
    assert lm.has_cache
    feeds = decoder_inputs(config.vocab_size, length=9)
    ids, mask, pos = (feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    _, cache = lm.run(ids[:, :6], mask[:, :6], pos[:, :6], lm.empty_cache(2))
    step, _ = lm.run(ids[:, 6:], mask, pos[:, 6:], cache)
    with torch.no_grad():
        expected = model(**feeds).logits.numpy()
    assert np.abs(step - expected[:, 6:]).max() <= 1e-4
    generated = lm.generate(ids, mask, 24)
    np.testing.assert_array_equal(
        generated, hf_greedy(model, feeds["input_ids"], feeds["attention_mask"], 24)
    )
