"""LED's banded encoder attention (mobius/synth/overrides/led.py): the same encoder output as HF's
chunked sliding window, padded to the window, for a window shorter than the input."""

from __future__ import annotations

import torch

from mobius.synth.overrides import install_overrides
from mobius.testing.configs import tiny_config_for


def test_banded_window_equals_hf_chunked_window():
    from transformers import LEDModel

    config = tiny_config_for("led", attention_window=4)
    torch.manual_seed(0)
    hf = LEDModel(config).eval().get_encoder()
    ours = LEDModel(config).eval().get_encoder()
    ours.load_state_dict(hf.state_dict())
    install_overrides(ours)
    ids = torch.randint(3, config.vocab_size, (2, 11))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # right padding; 11 is not a multiple of the window
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(input_ids=ids, attention_mask=mask).last_hidden_state
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5)
    # the window matters at this length: full attention would give something else
    wide = tiny_config_for("led", attention_window=32)
    full = LEDModel(wide).eval().get_encoder()
    full.load_state_dict(hf.state_dict())
    with torch.no_grad():
        unbounded = full(input_ids=ids, attention_mask=mask).last_hidden_state
    assert not torch.allclose(unbounded, expected, atol=1e-3)
