"""xLSTM carries its own cache (``xLSTMCache.rnn_state``), traced for one token and looped.

Its full forward runs the chunkwise mLSTM kernel and its cached decode the recurrent step; the two
differ by about 1.2e-4 in float32 on the tiny model (HF against HF), so the reference here is
what the graph computes: HF run token by token on its own cache, at the usual 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mobius
from mobius.testing.configs import tiny_config_for
from mobius.testing.parity import OnnxCausalLM, decoder_inputs
from mobius.testing.tiny import randomize

ATOL = 1e-4
PREFILL = 6


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    config = tiny_config_for("xlstm")
    torch.manual_seed(0)
    model = randomize(AutoModelForCausalLM.from_config(config).eval(), seed=0)
    root = tmp_path_factory.mktemp("xlstm")
    model.save_pretrained(root / "hf")
    return mobius.build(root / "hf").save(root / "onnx"), model, config


def hf_token_by_token(model, ids: torch.Tensor) -> np.ndarray:
    """HF's logits for each token, fed one at a time on its own cache."""
    cache, logits = None, []
    with torch.no_grad():
        for t in range(ids.shape[1]):
            out = model(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True)
            cache = out.cache
            logits.append(out.logits)
    return torch.cat(logits, 1).numpy()


def test_prefill_and_decode_match_hf_decoding_token_by_token(built):
    out, model, config = built
    feeds = decoder_inputs(config.vocab_size, length=9)
    ids, mask, pos = (feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    expected = hf_token_by_token(model, feeds["input_ids"])
    lm = OnnxCausalLM(out)
    assert {n.rsplit(".", 1)[1] for n in lm.cache_names} == {
        "rnn_state_0",
        "rnn_state_1",
        "rnn_state_2",
    }
    first, cache = lm.run(ids[:, :PREFILL], mask[:, :PREFILL], pos[:, :PREFILL], lm.empty_cache(2))
    step, _ = lm.run(ids[:, PREFILL:], mask, pos[:, PREFILL:], cache)
    np.testing.assert_allclose(first, expected[:, :PREFILL], atol=ATOL, rtol=0)
    np.testing.assert_allclose(step, expected[:, PREFILL:], atol=ATOL, rtol=0)
