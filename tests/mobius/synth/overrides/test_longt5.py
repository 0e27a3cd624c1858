"""LongT5's and PEGASUS-X's encoders padded to whole blocks plus one, with no branch on the
length (mobius/synth/overrides/longt5.py, pegasus_x.py): the same encoder output as HF's, padding
rows included, at lengths that are and are not a multiple of the block."""

from __future__ import annotations

import copy

import pytest
import torch

from mobius.synth.overrides import install_overrides
from mobius.testing.configs import tiny_config_for


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        ("longt5", {"local_radius": 3}),  # blocks of 4
        ("pegasus_x", {"block_size": 4, "num_global_tokens": 3}),
    ],
)
def test_padded_blocks_equal_hf_encoder(model_type, overrides):
    from transformers import AutoModelForSeq2SeqLM

    config = tiny_config_for(model_type, **overrides)
    torch.manual_seed(0)
    hf = AutoModelForSeq2SeqLM.from_config(config).eval().get_encoder()
    ours = copy.deepcopy(hf)
    install_overrides(ours)
    for length in (4, 9):  # a multiple of the block (HF does not pad), and not
        ids = torch.randint(3, config.vocab_size, (2, length))
        mask = torch.ones_like(ids)
        mask[1, length - 2 :] = 0  # right padding
        with torch.no_grad():
            expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
            got = ours(input_ids=ids, attention_mask=mask).last_hidden_state
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, atol=1e-5), (model_type, length)
