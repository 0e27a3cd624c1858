"""Longformer's window and global tokens as dense masked attention
(mobius/synth/overrides/longformer.py): the same output as HF's chunked window padded to the
window, with global tokens, for a window shorter than the input."""

from __future__ import annotations

import torch

from mobius.synth.overrides import install_overrides
from mobius.testing.configs import tiny_config_for
from mobius.testing.tiny import randomize


def test_dense_window_and_global_tokens_equal_hf():
    from transformers import LongformerModel

    config = tiny_config_for("longformer", attention_window=4)
    hf = randomize(LongformerModel(config).eval())
    ours = LongformerModel(config).eval()
    ours.load_state_dict(hf.state_dict())
    install_overrides(ours)
    ids = torch.randint(3, config.vocab_size, (2, 11))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # right padding; 11 is not a multiple of the window
    global_ = torch.zeros_like(ids)
    global_[:, 0] = 1  # [CLS], as the classification head sets it
    global_[0, 5] = 1  # one more, in one row only
    for kwargs in ({}, {"global_attention_mask": global_}):
        with torch.no_grad():
            expected = hf(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
            got = ours(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
        real = mask.bool()
        assert torch.allclose(got[real], expected[real], atol=1e-5), kwargs
    # global tokens matter: without them the output differs
    with torch.no_grad():
        local = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    assert not torch.allclose(local[real], expected[real], atol=1e-3)
