"""BLT's overrides (mobius/synth/overrides/blt.py) against the HF model they stand in for; the
conversion at several patch counts is checked by ``benchmarks/override_lengths.py``."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.models.blt import modeling_blt

from mobius.synth.overrides.blt import _byte_group_hash
from mobius.synth.shims import make_traceable
from mobius.testing.causal_lm import blt_with_varied_patches
from mobius.testing.parity import decoder_inputs

ATOL = 1e-4


@pytest.mark.parametrize("group_size", range(1, 9))
def test_hashes_match_the_unfolded_windows(group_size):
    ids = torch.randint(0, 256, (3, 40))
    for prime in (1000000007, 5915587277, 9576890767):  # their powers wrap around in int64
        expected = modeling_blt.byte_group_hash_function(ids, group_size, prime, 30000)
        assert torch.equal(_byte_group_hash(ids, group_size, prime, 30000), expected)


def test_overridden_model_matches_hf_on_padded_varied_patches():
    model, config = blt_with_varied_patches()
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
