"""DeepSeek-V4's compressors with padded windows (overrides/deepseek_v4.py), against HF."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import mobius
from mobius.synth.shims import make_traceable
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.parity import OnnxCausalLM, causal_lm_parity, decoder_inputs

ATOL = 1e-4
# HCA windows of 8 tokens (the default 128 is longer than any length here) and a top-k of 3, so the
# lengths below cover no window, one, several, and more visible windows than the indexer keeps
SMALL = {
    "index_topk": 3,
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
}
LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 33]


def _feeds(model, length: int) -> dict[str, torch.Tensor]:
    return decoder_inputs(model.config.vocab_size, length=length, pad=min(3, length - 1))


def test_padded_windows_match_hf_at_every_length():
    model, _ = tiny_causal_lm("deepseek_v4", **SMALL)
    fixed = make_traceable(copy.deepcopy(model))
    for length in LENGTHS:
        feeds = _feeds(model, length)
        with torch.no_grad():
            expected = model(**feeds, use_cache=False).logits
            actual = fixed(**feeds, use_cache=False).logits
        torch.testing.assert_close(actual, expected, atol=ATOL, rtol=0, msg=f"{length} tokens")


def test_with_a_cache_the_modules_run_hf_code():
    model, _ = tiny_causal_lm("deepseek_v4", **SMALL)
    fixed = make_traceable(copy.deepcopy(model))
    feeds = _feeds(model, 11)
    with torch.no_grad():
        expected = model(**feeds, use_cache=True).logits
        actual = fixed(**feeds, use_cache=True).logits
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


@pytest.mark.slow
def test_converts_without_a_cache_and_the_trace_holds_for_every_length(tmp_path):
    model, config = tiny_causal_lm("deepseek_v4", **SMALL)
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    diffs = causal_lm_parity(model, out, config)
    assert not diffs["cache"] and diffs["max_diff"] <= ATOL, diffs
    lm = OnnxCausalLM(out)
    for length in [1, 4, 7, 9, 16, 33]:
        feeds = _feeds(model, length)
        with torch.no_grad():
            expected = model(**feeds).logits.numpy()
        ids, mask, positions = (
            feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids")
        )
        actual, _ = lm.run(ids, mask, positions, lm.empty_cache(len(ids)))
        diff = np.abs(actual - expected)[mask.astype(bool)].max()
        assert diff <= ATOL, (length, diff)
