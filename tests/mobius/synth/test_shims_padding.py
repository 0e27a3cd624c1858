"""A one-token step graph keeps the recurrent layers' padding mask (it also runs the prefill)."""

import torch
from transformers.masking_utils import create_recurrent_attention_mask
from transformers.models.jamba import modeling_jamba

from mobius.synth.shims import _padding_mask_per_token, tracing_branches
from mobius.testing.configs import tiny_config_for


def test_a_single_padded_token_keeps_its_mask():
    embeds = torch.zeros(2, 1, 8)
    mask = torch.tensor([[0, 0, 0], [1, 1, 1]])
    assert create_recurrent_attention_mask(None, embeds, mask) is None  # transformers drops it
    torch.testing.assert_close(_padding_mask_per_token(None, embeds, mask), mask[:, -1:])
    wide = torch.zeros(2, 2, 8)
    torch.testing.assert_close(_padding_mask_per_token(None, wide, mask), mask[:, -2:])
    assert _padding_mask_per_token(None, embeds, None) is None


def test_only_one_token_traces_swap_the_mask():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(tiny_config_for("jamba"))
    original = modeling_jamba.create_recurrent_attention_mask
    with tracing_branches(model):
        assert modeling_jamba.create_recurrent_attention_mask is original
    with tracing_branches(model, one_token=True):
        assert modeling_jamba.create_recurrent_attention_mask is _padding_mask_per_token
    assert modeling_jamba.create_recurrent_attention_mask is original
