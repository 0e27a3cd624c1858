"""Switch Transformers' and NLLB-MoE's expert dicts run every expert on every token
(mobius/synth/overrides/switch_moe.py): HF's sparse MLP output, and a trace for any token count."""

from __future__ import annotations

import copy

import pytest
import torch

from mobius.synth.overrides import install_overrides
from mobius.synth.shims import tracing_branches
from mobius.testing.configs import tiny_config_for
from mobius.testing.tiny import randomize

CASES = {
    # every layer sparse; eval capacity below the token count, so some picks are dropped
    "switch_transformers": {"encoder_sparse_step": 1, "expert_capacity": 3},
    "nllb-moe": {"encoder_sparse_step": 1, "moe_token_dropout": 0.2},
}


def _sparse_mlp(model_type: str) -> torch.nn.Module:
    from transformers import AutoModelForSeq2SeqLM

    config = tiny_config_for(model_type, **CASES[model_type])
    torch.manual_seed(0)
    model = randomize(AutoModelForSeq2SeqLM.from_config(config).eval())
    return next(m for m in model.modules() if type(m).__name__.endswith("SparseMLP"))


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_every_expert_equals_hf_and_traces(model_type):
    hf = _sparse_mlp(model_type)
    ours = copy.deepcopy(hf)
    install_overrides(ours)
    hidden = torch.randn(
        2,
        7,
        hf.experts["expert_0"].fc1.in_features
        if model_type == "nllb-moe"
        else hf.experts["expert_0"].wi.in_features,
    )
    with torch.no_grad():
        expected, got = hf(hidden), ours(hidden)
    assert (expected != 0).any()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)

    tokens = torch.export.Dim("tokens", min=2, max=64)
    with tracing_branches(ours):
        program = torch.export.export(ours, (hidden,), dynamic_shapes=({1: tokens},), strict=False)
    longer = torch.randn(2, 11, hidden.shape[-1])
    with torch.no_grad():
        torch.testing.assert_close(program.module()(longer), hf(longer), atol=1e-5, rtol=1e-5)
