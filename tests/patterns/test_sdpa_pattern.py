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


def test_window_in_the_text_sub_config_declines(monkeypatch, tmp_path):
    # Gemma-3 (multimodal) keeps sliding_window in text_config: traced with sdpa, its sliding
    # layers' masks carry the window, which a rebuilt plain causal mask would drop
    from mobius.tasks.causal_lm import CausalLMTask
    from mobius.testing.causal_lm import tiny_causal_lm
    from mobius.testing.parity import causal_lm_parity

    monkeypatch.setattr(CausalLMTask, "attention_implementations", ("sdpa", "eager"))
    model, config = tiny_causal_lm("gemma3")
    assert config.text_config.sliding_window < 9  # shorter than the test sequence
    model.save_pretrained(tmp_path / "ckpt")
    out = mobius.build(tmp_path / "ckpt").save(tmp_path / "onnx")
    result = causal_lm_parity(model, out, config)
    assert result["max_diff"] <= 1e-4, result
