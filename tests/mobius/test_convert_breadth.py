"""A representative third of the causal-LM model types, each family shape once (issue 7's CI set).

The other two thirds run in ``benchmarks/coverage.py`` (the whole sweep, ``docs/coverage.md``).
Together with the families in ``tasks/test_causal_lm.py``, ``synth/test_state.py``,
``test_convert_sweep_classes.py`` and ``tests/patterns``, these cover one type per shape the sweep
found: how attention is reached (captured, matched, carried through the trace, lowered), how
positions are made, the cache's state kinds, MoE routing, and the lowerings that only some families
need.

Each type is built the way the sweep builds it (``tiny_causal_lm``: every parameter randomised),
converted in process with ``mobius.build``, and compared with eager PyTorch at atol 1e-4: a
prefill, then a 3-token decode step on the returned cache.
"""

from __future__ import annotations

import pytest

import mobius
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.parity import causal_lm_parity

ATOL = 1e-4

# model type -> what it stands for
WITH_CACHE = {
    # captured attention, one type per variant not covered elsewhere
    "cohere": "parallel attention + MLP block, LayerNorm without bias",
    "starcoder2": "biased projections, sliding window",
    "persimmon": "QK LayerNorm, partial rotary",
    "nemotron": "LayerNorm1P (1 + weight), squared-ReLU MLP",
    "gpt_bigcode": "multi-query attention with a fused c_attn",
    "codegen": "GPT-J-style rotary, fused qkv in mp_num groups",
    "biogpt": "learned positions with an offset, scaled embeddings",
    "glm4": "partial interleaved rotary, post-norms",
    "mpt": "ALiBi through the attention mask",
    "granitemoe": "MoE with multipliers",
    "jetmoe": "mixture of attention heads (index_put, item)",
    "phimoe": "sparse-mixer routing under no_grad (grad-mode regions)",
    "deepseek_v2": "MLA with complex-number rotary",
    "llama4_text": "chunked attention, complex-number rotary",
    "gpt_oss": "attention sinks",
    "dory": "nGPT: unit-norm states, learned scales multiplied by 1/initializer_range",
    # cache carried through the trace
    "mbart": "decoder with unused cross-attention, learned positions from the cache length",
    "marian": "sinusoidal positions from the cache length",
    "whisper": "audio model's text decoder",
    "big_bird": "hand-written attention in a BERT-style decoder",
    "megatron-bert": "BERT-style decoder whose cache is an EncoderDecoderCache",
    "gemma4": "vision tower next to the text decoder",
    "gemma3n_text": "KV shared across layers, AltUp, erfinv",
    "diffllama": "differential attention: two attention calls per layer",
    "glm_moe_dsa": "DSA indexer keys carried as a growing state",
    "granitemoehybrid": "mamba2 layers next to attention",
    "qwen3_next": "gated delta rule (triangular solve) next to attention",
}
# second representatives, run with ``-m sweep``
SWEEP = {"olmo_hybrid": "gated delta rule in a hybrid stack (qwen3_next's, above)"}
# models transformers itself runs without any cache: they convert without one
WITHOUT_CACHE = {"openai-gpt": "no past_key_values in the HF model at all"}


def _convert(model_type: str, tmp_path) -> dict:
    model, config = tiny_causal_lm(model_type)
    model.save_pretrained(tmp_path / "hf")
    # the text path (a VLM checkpoint would be detected as image-text-to-text)
    out = mobius.build(tmp_path / "hf", task="text-generation").save(tmp_path / "onnx")
    return causal_lm_parity(model, out, config)


@pytest.mark.parametrize(
    "model_type", [*WITH_CACHE, *(pytest.param(t, marks=pytest.mark.sweep) for t in SWEEP)]
)
def test_prefill_and_decode_with_cache(model_type, tmp_path):
    result = _convert(model_type, tmp_path)
    assert result["cache"], f"{model_type} was built without a cache"
    assert result["max_diff"] <= ATOL, result


@pytest.mark.parametrize("model_type", WITHOUT_CACHE)
def test_prefill_without_cache(model_type, tmp_path):
    result = _convert(model_type, tmp_path)
    assert not result["cache"]
    assert result["max_diff"] <= ATOL, result
