"""Reference sliding-window caches carried through the trace (``synth/state_reference.py``):
Unlimited-OCR's text layers keep the prompt's keys for good beside a window of decoded ones (4 in
the tiny config). The decoder carries every token in ``key``/``value`` and the prompt's length in
``prefill_length``; checked past the window's end against HF ``generate`` on each row alone
(``testing/vlm_row_reference``: HF's batched cached steps misread the padding mask there)."""

from __future__ import annotations

import json

import pytest

import mobius
from mobius.testing.vlm import tiny_vlm, vlm_parity

ATOL = 1e-4


@pytest.fixture(scope="module")
def unlimited_ocr(tmp_path_factory):
    work = tmp_path_factory.mktemp("unlimited_ocr")
    model, _ = tiny_vlm("unlimited_ocr", work / "hf")
    return model, mobius.build(work / "hf").save(work / "onnx")


def test_decoder_carries_the_prompt_length(unlimited_ocr):
    model, out = unlimited_ocr
    manifest = json.loads((out / "mobius.json").read_text())
    inputs = manifest["graphs"]["decoder_model.onnx"]["inputs"]
    layers = model.config.text_config.num_hidden_layers
    for i in range(layers):
        assert f"past_key_values.{i}.key" in inputs
        assert f"past_key_values.{i}.prefill_length" in inputs


def test_matches_hf_past_the_window(unlimited_ocr):
    model, out = unlimited_ocr
    window = model.config.text_config.sliding_window
    result = vlm_parity(model, out, new_tokens=window + 4)
    diffs = [result[k] for k in result if k.endswith("_diff")]
    assert max(diffs) <= ATOL, result
    assert result["tokens_equal"]
    assert "left-padded rows" in result["reference"]
