"""Failure classes of the causal-LM coverage sweep, each on one tiny model type that showed it.

Built the way the sweep builds them (``mobius.testing.causal_lm.tiny_causal_lm``: the class that
``AutoModelForCausalLM`` maps the type to, randomised), saved, converted with ``mobius.build`` and
compared with eager PyTorch at atol 1e-4 (with a KV cache: prefill, then a decode step on it).
"""

from __future__ import annotations

import pytest

import mobius
from mobius.errors import UnsupportedError
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.parity import causal_lm_parity

ATOL = 1e-4


def convert(model_type: str, tmp_path, **kwargs) -> tuple[dict, object]:
    model, config = tiny_causal_lm(model_type, **kwargs)
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    return causal_lm_parity(model, out, config), config


@pytest.mark.parametrize("model_type", ["emu3", "mllama"])
def test_nested_text_config_converts_as_causal_lm_with_cache(model_type, tmp_path):
    # the *ForCausalLM is built from the text sub-config, so the saved config.json has the nested
    # type (emu3_text_model), which no auto mapping names
    result, config = convert(model_type, tmp_path)
    assert config.model_type.endswith("_text_model")
    assert result["cache"] and result["max_diff"] <= ATOL, result


def test_encoder_family_as_decoder_keeps_a_cache(tmp_path):
    # (BERT with and without is_decoder: tests/patterns/test_sdpa.py)
    result, config = convert("roberta", tmp_path)
    assert config.is_decoder
    assert result["cache"] and result["max_diff"] <= ATOL, result


def test_encoder_family_bidirectional_converts_without_cache(tmp_path):
    result, config = convert("roberta", tmp_path, is_decoder=False)
    assert not config.is_decoder
    assert not result["cache"] and result["max_diff"] <= ATOL, result


def test_module_built_mask_declines_capture(tmp_path):
    # Doge adds a learned per-key bias (its dynamic mask) that the captured op would drop; the
    # cache is then carried through the trace with the model's own attention
    result, _ = convert("doge", tmp_path)
    assert result["cache"] and result["max_diff"] <= ATOL, result


def test_composite_with_decoder_sub_config(tmp_path):
    # MusicGen's causal LM is built from its `decoder` sub-config (not `text_config`)
    result, config = convert("musicgen", tmp_path)
    assert config.model_type == "musicgen_decoder"
    assert result["max_diff"] <= ATOL, result


def test_looped_experts_in_another_weight_layout(tmp_path):
    # DBRX's experts loop over the experts some token picked (a data-dependent loop) and keep
    # their weights flat ([E*I, H]); the gathered-experts shim reads them through its layout entry
    result, _ = convert("dbrx", tmp_path)
    assert result["cache"] and result["max_diff"] <= ATOL, result


def test_model_that_takes_the_whole_sequence_each_step_converts_without_cache(tmp_path):
    # CPM-Ant slices its input by the cache length (the caller passes every token again at each
    # step), which the new-tokens-only cache contract cannot express; its padding count also needs
    # a registry override (synth/overrides.py) to keep the sequence length symbolic
    result, _ = convert("cpmant", tmp_path)
    assert not result["cache"] and result["max_diff"] <= ATOL, result


def test_length_branch_is_traced_one_token_at_a_time(tmp_path):
    # bailing_hybrid's linear attention runs a recurrent kernel up to 64 tokens and a chunked one
    # beyond: the full-length trace only holds up to 64 tokens (it was 6.4 off at 70), so the
    # model is traced for one token and looped, and a 70-token prefill matches too
    model, config = tiny_causal_lm("bailing_hybrid")
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    result = causal_lm_parity(model, out, config, prefill=70, length=80)
    assert result["cache"] and result["max_diff"] <= ATOL, result


@pytest.mark.sweep  # the bound itself is unit-tested in synth/test_trace_bounds.py (CI)
def test_trace_that_holds_only_for_some_lengths_is_refused(tmp_path, monkeypatch):
    # deepseek_v4's compressors, as HF writes them (without mobius's override), count windows
    # from the length: the trace holds for 4 to 7 tokens only, which would be a graph silently
    # wrong for every other length
    from mobius.synth.overrides import OVERRIDES

    for name in [n for n in OVERRIDES if ".deepseek_v4." in n]:
        monkeypatch.delitem(OVERRIDES, name)
    model, _ = tiny_causal_lm("deepseek_v4")
    model.save_pretrained(tmp_path / "hf")
    with pytest.raises(UnsupportedError, match=r"holds only for 4 <= input_ids\[1\] <= 7"):
        mobius.build(tmp_path / "hf")
