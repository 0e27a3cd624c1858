"""Attention computed with torch's sdpa outside the AttentionInterface is matched only when causal."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

import mobius
from mobius.testing.parity import OnnxCausalLM, max_abs_diff
from mobius.testing.tiny import make_checkpoint
from patterns.base import aten, is_op


@pytest.mark.parametrize("is_decoder", [True, False])
def test_bert_lm_head_is_cached_only_when_causal(is_decoder, tmp_path):
    # BertLMHeadModel attends causally only with is_decoder=True; otherwise its (bidirectional)
    # attention must not be mistaken for causal attention with a cache
    model, config = make_checkpoint(
        "bert",
        tmp_path / "ckpt",
        auto=AutoModelForCausalLM,
        is_decoder=is_decoder,
        architectures=["BertLMHeadModel"],
    )
    out = mobius.build(tmp_path / "ckpt").save(tmp_path / "onnx")
    assert OnnxCausalLM(out).has_cache == is_decoder
    assert max_abs_diff(model, out, config) <= 1e-4


def test_window_in_the_text_sub_config_declines(monkeypatch, tmp_path):
    # Gemma-3 (multimodal) keeps sliding_window in text_config: traced with sdpa, its sliding
    # layers' masks carry the window, which a rebuilt plain causal mask would drop
    from mobius.tasks.causal_lm import CausalLMTask
    from mobius.testing.causal_lm import tiny_causal_lm
    from mobius.testing.parity import causal_lm_parity

    monkeypatch.setattr(CausalLMTask, "attention_implementations", ("sdpa", "eager"))
    model, config = tiny_causal_lm("gemma3")
    assert config.text_config.sliding_window < 9  # shorter than the test sequence
    model.save_pretrained(tmp_path / "ckpt")
    out = mobius.build(tmp_path / "ckpt", task="text-generation").save(tmp_path / "onnx")
    result = causal_lm_parity(model, out, config)
    assert result["max_diff"] <= 1e-4, result


class _CausalAttention(torch.nn.Module):
    """sdpa under a causal mask that reads the padding mask, or not (BLT's entropy patcher)."""

    def __init__(self, reads_padding: bool) -> None:
        super().__init__()
        self.reads_padding = reads_padding

    def forward(self, input_ids, attention_mask):  # the contract's names: inputs, not weights
        x = input_ids
        positions = torch.arange(x.shape[2])
        mask = positions[None, :] <= positions[:, None]
        if self.reads_padding:
            mask = mask[None, None] & attention_mask.bool()[:, None, None, :]
        else:
            mask = mask[None, None].expand(x.shape[0], 1, -1, -1)
        return torch.nn.functional.scaled_dot_product_attention(x, x, x, attn_mask=mask)


@pytest.mark.parametrize("reads_padding", [True, False])
def test_a_mask_that_ignores_padding_declines(reads_padding):
    # the claim rebuilds the mask from attention_mask: a model whose mask never reads it (no
    # padding there) would get padding it does not apply
    from patterns import sdpa

    x, mask = torch.randn(2, 2, 5, 4), torch.ones(2, 5, dtype=torch.long)
    dims = ({0: "b", 2: "s"}, {0: "b", 1: "s"})
    dynamic = tuple({a: torch.export.Dim.AUTO for a in d} for d in dims)
    program = torch.export.export(
        _CausalAttention(reads_padding), (x, mask), dynamic_shapes=dynamic
    )
    node = next(n for n in program.graph.nodes if is_op(n, aten.scaled_dot_product_attention))
    padding = [n.name for n in program.graph.nodes if n.op == "placeholder"][1]
    reason = sdpa._mask_reason(node.args[3], False, None, padding)
    assert reason == (None if reads_padding else sdpa.IGNORES_PADDING)
