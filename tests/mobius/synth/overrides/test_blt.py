"""BLT's overrides (mobius/synth/overrides/blt.py) against the HF model they stand in for."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.models.blt import modeling_blt

import mobius
from mobius.synth.overrides.blt import _byte_group_hash
from mobius.synth.shims import make_traceable
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.parity import causal_lm_parity, decoder_inputs

ATOL = 1e-4


def _blt_with_varied_patches():
    """The tiny BLT with its entropy threshold between two of its entropies on a 30-byte prompt,
    so that patches have different lengths and the two rows different patch counts (the tiny
    config's threshold lies below every entropy of a random model: one byte per patch)."""
    model, config = tiny_causal_lm("blt")
    ids = decoder_inputs(config.vocab_size, length=30)["input_ids"]
    with torch.no_grad():
        entropies = model.model.patcher(ids, patch_size=config.patch_size, threshold=0.0)[0]
    ranked = entropies[:, 1:].flatten().sort().values
    middle = len(ranked) // 2
    config.patching_threshold = float(ranked[middle] + ranked[middle + 1]) / 2
    return model, config


@pytest.mark.parametrize("group_size", range(1, 9))
def test_hashes_match_the_unfolded_windows(group_size):
    ids = torch.randint(0, 256, (3, 40))
    for prime in (1000000007, 5915587277, 9576890767):  # their powers wrap around in int64
        expected = modeling_blt.byte_group_hash_function(ids, group_size, prime, 30000)
        assert torch.equal(_byte_group_hash(ids, group_size, prime, 30000), expected)


def test_overridden_model_matches_hf_on_padded_varied_patches():
    model, config = _blt_with_varied_patches()
    fixed = make_traceable(copy.deepcopy(model))
    for length in (9, 30):
        feeds = decoder_inputs(config.vocab_size, length=length)
        with torch.no_grad():
            lengths = model.model.patcher(
                feeds["input_ids"],
                patch_size=config.patch_size,
                threshold=config.patching_threshold,
            )[1]
            expected, got = model(**feeds).logits, fixed(**feeds).logits
        assert (lengths > 1).any() and (lengths <= 0).any()  # varied patches, rows padded
        torch.testing.assert_close(got, expected, atol=0, rtol=0)


@pytest.mark.slow
def test_blt_converts_with_data_dependent_patches(tmp_path):
    # the patch count is data dependent: the graph must follow it for other lengths and inputs
    model, config = _blt_with_varied_patches()
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    for length in (1, 9, 25, 30):  # one byte: reshapes to a runtime size of 0 (allowzero)
        diffs = causal_lm_parity(model, out, config, length=length)
        assert diffs["max_diff"] <= ATOL, (length, diffs)
