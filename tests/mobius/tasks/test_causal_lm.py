"""Causal LMs with the KV cache: prefill, a decode step fed with `present`, and greedy generation.

Tiny random-weight models (2 layers, hidden 64, every parameter randomised), batch 2 with left
padding, compared with eager PyTorch at atol 1e-4 and with HF `generate` token for token.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mobius
from mobius.testing.parity import OnnxCausalLM, decoder_inputs, hf_greedy

FAMILIES = [
    "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3_text", "granite",
    "olmo2", "stablelm", "phi", "gpt2", "gpt_neox", "gptj", "opt", "falcon", "mixtral",
    "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3",
]  # fmt: skip
ATOL = 1e-4
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def converted(checkpoints, tmp_path_factory):
    cache: dict[str, tuple] = {}

    def get(model_type: str):
        if model_type not in cache:
            directory, model, config = checkpoints.get(model_type)
            out = mobius.build(directory).save(tmp_path_factory.mktemp(model_type) / "onnx")
            cache[model_type] = (OnnxCausalLM(out), model, config)
        return cache[model_type]

    return get


@pytest.mark.parametrize("model_type", FAMILIES)
def test_prefill_then_decode_step(model_type, converted):
    lm, model, config = converted(model_type)
    assert lm.has_cache
    feeds = decoder_inputs(config.vocab_size, length=9)
    ids, mask, pos = (feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    with torch.no_grad():
        expected = model(**feeds).logits.numpy()
    keep = mask.astype(bool)
    prefill, cache = lm.run(ids[:, :6], mask[:, :6], pos[:, :6], lm.empty_cache(2))
    assert np.abs(prefill - expected[:, :6])[keep[:, :6]].max() <= ATOL
    step, cache = lm.run(ids[:, 6:], mask, pos[:, 6:], cache)  # 3 new tokens over a 6-token cache
    assert np.abs(step - expected[:, 6:]).max() <= ATOL
    assert all(v.shape[2] == 9 for v in cache.values())


@pytest.mark.parametrize("model_type", FAMILIES)
def test_greedy_generation_matches_hf(model_type, converted):
    lm, model, config = converted(model_type)
    feeds = decoder_inputs(config.vocab_size)
    expected = hf_greedy(model, feeds["input_ids"], feeds["attention_mask"], NEW_TOKENS)
    actual = lm.generate(feeds["input_ids"].numpy(), feeds["attention_mask"].numpy(), NEW_TOKENS)
    np.testing.assert_array_equal(actual, expected)
