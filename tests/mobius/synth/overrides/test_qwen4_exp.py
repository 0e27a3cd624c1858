"""Qwen4-Exp's QSA indexer override (mobius/synth/overrides/qwen4_exp.py) against HF's own loop."""

from __future__ import annotations

import copy

import torch

import mobius
from mobius.synth.overrides.qwen4_exp import batched_selection
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.parity import causal_lm_parity

ATOL = 1e-4


def _compared_indexers(model: torch.nn.Module) -> list[int]:
    """Make every indexer run HF's forward and the override on the same call; count differences."""
    differences: list[int] = []
    for layer in model.model.layers:
        indexer = getattr(getattr(layer, "self_attn", None), "indexer", None)
        if indexer is None:
            continue
        hf_forward = indexer.forward
        batched = copy.copy(indexer)
        batched_selection(batched)

        def forward(
            hidden, positions, mask, cache=None, hf=hf_forward, batched=batched, i=indexer, **kw
        ):
            if cache is not None:  # both append the new indexer keys: the second call starts over
                layer_cache = cache.layers[i.layer_idx]
                saved = layer_cache.indexer_keys, layer_cache.is_indexer_initialized
            expected = hf(hidden, positions, mask, cache, **kw)
            if cache is not None:
                layer_cache.indexer_keys, layer_cache.is_indexer_initialized = saved
            actual = batched.forward(hidden, positions, mask, cache, **kw)
            differences.append(int((actual != expected).sum()))
            return actual

        indexer.forward = forward
    return differences


def test_indexer_selection_matches_hf_on_padded_batches_with_and_without_a_cache():
    model, config = tiny_causal_lm("qwen4_exp_text")
    differences = _compared_indexers(model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (3, 27), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :5], mask[1, :2] = 0, 0
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)  # one call over every length up to 27
        out = model(input_ids=ids[:, :10], attention_mask=mask[:, :10], use_cache=True)
        for end in (11, 12, 17, 27):  # decode steps of one and of several tokens
            start = end - (1 if end < 17 else 5 if end == 17 else 10)
            out = model(
                input_ids=ids[:, start:end],
                attention_mask=mask[:, :end],
                cache=out.cache,
                use_cache=True,
            )
    assert len(differences) == 6 and not any(differences), differences


def test_indexed_attention_converts_with_a_cache_and_matches(tmp_path):
    # one indexed-attention layer: the trace carries the cache over a whole prompt, so the
    # batched selection runs in ONNX for many queries at once (the hybrid tiny model steps
    # one token at a time because of its gated-delta layer)
    model, config = tiny_causal_lm(
        "qwen4_exp_text", num_hidden_layers=1, layer_types=["indexed_attention"]
    )
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    for prefill, length in ((6, 9), (20, 30)):
        diffs = causal_lm_parity(model, out, config, prefill=prefill, length=length)
        assert diffs["cache"] and diffs["max_diff"] <= ATOL, (prefill, length, diffs)
