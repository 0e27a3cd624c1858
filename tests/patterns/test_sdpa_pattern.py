"""Attention computed with torch's sdpa outside the AttentionInterface is matched only when causal."""

from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM

import mobius
from mobius.testing.parity import OnnxCausalLM, max_abs_diff
from mobius.testing.tiny import make_checkpoint


@pytest.mark.parametrize("is_decoder", [True, False])
def test_bert_lm_head_is_cached_only_when_causal(is_decoder, tmp_path):
    # BertLMHeadModel attends causally only with is_decoder=True; otherwise its (bidirectional)
    # attention must not be mistaken for causal attention with a cache
    model, config = make_checkpoint(
        "bert",
        tmp_path / "ckpt",
        auto=AutoModelForCausalLM,
        is_decoder=is_decoder,
        architectures=["BertLMHeadModel"],
    )
    out = mobius.build(tmp_path / "ckpt").save(tmp_path / "onnx")
    assert OnnxCausalLM(out).has_cache == is_decoder
    assert max_abs_diff(model, out, config) <= 1e-4
