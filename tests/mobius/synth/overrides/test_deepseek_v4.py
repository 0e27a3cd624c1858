"""DeepSeek-V4's compressors with padded windows (overrides/deepseek_v4.py), against HF in
PyTorch; the conversion at every length is checked by ``benchmarks/override_lengths.py``."""

from __future__ import annotations

import copy

import torch

from mobius.synth.shims import make_traceable
from mobius.testing.causal_lm import DEEPSEEK_V4_SMALL_WINDOWS, tiny_causal_lm
from mobius.testing.parity import decoder_inputs

ATOL = 1e-4
SMALL = DEEPSEEK_V4_SMALL_WINDOWS
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
