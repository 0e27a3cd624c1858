"""Reformer's axial position override (mobius/synth/overrides/reformer.py) against HF."""

from __future__ import annotations

import copy

import torch
from transformers import AutoModelForCausalLM

import mobius
from mobius.synth.shims import make_traceable
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.configs import tiny_config_for
from mobius.testing.parity import causal_lm_parity
from mobius.testing.tiny import randomize

ATOL = 1e-4


def test_axial_positions_match_hf_for_every_row_of_a_batch():
    config = tiny_config_for("reformer")
    model = randomize(AutoModelForCausalLM.from_config(config).eval(), seed=0)
    fixed = make_traceable(copy.deepcopy(model))
    positions = torch.tensor([[0, 0, 1, 2, 3], [7, 8, 9, 30, 31], [4, 4, 5, 6, 7]])
    with torch.no_grad():
        expected = model.reformer.embeddings.position_embeddings(positions)
        actual = fixed.reformer.embeddings.position_embeddings(positions)
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


def test_reformer_converts_and_matches_up_to_its_longest_sequence(tmp_path):
    model, config = tiny_causal_lm("reformer")
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    for length in (9, config.max_position_embeddings):
        diffs = causal_lm_parity(model, out, config, length=length)
        assert diffs["max_diff"] <= ATOL, (length, diffs)
