"""CANINE's chunked local attention, molecule repetition and mask pooling
(mobius/synth/overrides/canine.py): the same output as HF's loops for lengths that are and are not
multiples of the chunk and of the downsampling rate."""

from __future__ import annotations

import torch

from mobius.synth.overrides import install_overrides
from mobius.testing.configs import tiny_config_for
from mobius.testing.tiny import randomize


def test_chunk_mask_and_gathers_equal_hf_loops():
    from transformers import CanineModel

    config = tiny_config_for("canine", local_transformer_stride=4)
    hf = randomize(CanineModel(config).eval())
    ours = CanineModel(config).eval()
    ours.load_state_dict(hf.state_dict())
    install_overrides(ours)
    for length in (5, 12, 14):  # fewer than two molecules, whole chunks, a partial chunk
        ids = torch.randint(3, 0x110000, (2, length))
        mask = torch.ones_like(ids)
        mask[1, length - 3 :] = 0
        with torch.no_grad():
            expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
            got = ours(input_ids=ids, attention_mask=mask).last_hidden_state
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, atol=1e-5), length
