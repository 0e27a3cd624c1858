"""Per-class overrides (mobius/synth/overrides.py), each against the HF model it stands in for."""

from __future__ import annotations

import copy

import torch
from transformers import AutoModelForCausalLM

import mobius
from mobius.synth.shims import make_traceable
from mobius.testing.configs import tiny_config_for
from mobius.testing.parity import causal_lm_parity
from mobius.testing.tiny import randomize

ATOL = 1e-4


def _rwkv(rescale_every: int):
    config = tiny_config_for("rwkv")
    config.rescale_every = rescale_every
    torch.manual_seed(0)
    return randomize(AutoModelForCausalLM.from_config(config).eval(), seed=0), config


def test_rwkv_single_token_steps_on_a_batch_match_the_full_forward():
    model, config = _rwkv(rescale_every=0)
    fixed = make_traceable(copy.deepcopy(model))
    ids = torch.randint(0, config.vocab_size, (3, 5))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        state, steps = None, []
        for t in range(ids.shape[1]):
            out = fixed(input_ids=ids[:, t : t + 1], state=state, use_cache=True)
            state = out.state
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), expected, atol=ATOL, rtol=0)


def test_rwkv_with_rescaled_layers_converts_exactly(tmp_path):
    model, config = _rwkv(rescale_every=1)  # every layer's output projections are rescaled
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    diffs = causal_lm_parity(model, out, config)
    assert diffs["cache"] and diffs["max_diff"] <= ATOL, diffs
