"""GIT's decoder override (mobius/synth/overrides/git.py), converted as text generation: cached
decoding matches the full forward, as it cannot in HF's own cached branch (which widens the mask
for image tokens the text-only cache does not hold). The image path: the VLM sweep."""

from __future__ import annotations

import mobius
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.parity import causal_lm_parity

ATOL = 1e-4


def test_git_decodes_with_a_cache_like_its_full_forward(tmp_path):
    model, config = tiny_causal_lm("git")
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf", task="text-generation").save(tmp_path / "onnx")
    for prefill, length in ((6, 9), (40, 50)):
        diffs = causal_lm_parity(model, out, config, prefill=prefill, length=length)
        assert diffs["cache"] and diffs["max_diff"] <= ATOL, (length, diffs)
