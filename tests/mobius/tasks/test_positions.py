"""Position ids mean one thing (``CONTRACTS.md``): every causal-LM graph takes ``position_ids``
counting real tokens from 0, whatever the model's own numbering.

Each type is the sweep's tiny model (every parameter randomised), converted with ``mobius.build``
and driven as onnxruntime-genai drives it: a left-padded batch (pads hold the pad token), a
prefill, then one token at a time on the returned cache, with the contract's position ids. The
reference is the HF model called as its users call it (``hf_reference_feeds``): without
``position_ids`` where it derives them itself, over the whole sequence. Design notes, 'Position ids'.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mobius
from mobius.tasks.positions import position_offset
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.parity import OnnxCausalLM, hf_reference_feeds, text_decoder_inputs

ATOL = 1e-4
LENGTH, PREFILL = 8, 4

# count positions from padding_idx + 1, derived from input_ids; read given position_ids raw
FROM_PADDING_IDX = ["camembert", "data2vec-text", "xlm-roberta-xl"]
# add their table's offset to given position_ids themselves; OPT derives them from the mask
OFFSET_BY_MODEL = {"opt": True, "biogpt": False, "xglm": False}  # -> derives them pad-aware


def _convert(model_type: str, tmp_path):
    model, config = tiny_causal_lm(model_type)
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    return model, config, OnnxCausalLM(out)


def _prefill_then_each_token(lm: OnnxCausalLM, feeds: dict) -> list[np.ndarray]:
    """The graph's logits: a prefill of ``PREFILL`` tokens, then one call per later token."""
    ids, mask, pos = (feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    logits, cache = lm.run(ids[:, :PREFILL], mask[:, :PREFILL], pos[:, :PREFILL], lm.empty_cache(2))
    steps = [logits]
    for t in range(PREFILL, ids.shape[1]):
        logits, cache = lm.run(ids[:, t : t + 1], mask[:, : t + 1], pos[:, t : t + 1], cache)
        steps.append(logits)
    return steps


def _assert_matches(steps: list[np.ndarray], expected: np.ndarray, mask: np.ndarray) -> None:
    keep = mask[:, :PREFILL].astype(bool)
    assert np.abs(steps[0] - expected[:, :PREFILL])[keep].max() <= ATOL
    for t, step in enumerate(steps[1:], start=PREFILL):
        assert np.abs(step[:, 0] - expected[:, t]).max() <= ATOL, f"decode step at {t}"


@pytest.mark.parametrize("model_type", FROM_PADDING_IDX)
def test_offset_family_takes_contract_positions(model_type, tmp_path):
    model, config, lm = _convert(model_type, tmp_path)
    assert position_offset(model) == config.pad_token_id + 1
    feeds = text_decoder_inputs(config, length=LENGTH)
    reference = hf_reference_feeds(model, feeds)
    assert "position_ids" not in reference  # the model derives them from input_ids itself
    with torch.no_grad():
        expected = model(**reference).logits.numpy()
    steps = _prefill_then_each_token(lm, feeds)
    _assert_matches(steps, expected, feeds["attention_mask"].numpy())

    # HF's own cached calls without position_ids count the past from the cache's length, pads
    # included; on the unpadded row that is the same numbering, so they agree there too
    with torch.no_grad():
        row = {k: v[1:] for k, v in feeds.items() if k != "position_ids"}
        out = model(
            input_ids=row["input_ids"][:, :PREFILL],
            attention_mask=row["attention_mask"][:, :PREFILL],
            use_cache=True,
        )
        cache = out.past_key_values
        for t in range(PREFILL, LENGTH):
            out = model(
                input_ids=row["input_ids"][:, t : t + 1],
                attention_mask=row["attention_mask"][:, : t + 1],
                past_key_values=cache,
                use_cache=True,
            )
            cache = out.past_key_values
            assert np.abs(out.logits[0, 0].numpy() - steps[t - PREFILL + 1][1, 0]).max() <= ATOL


@pytest.mark.parametrize("model_type", OFFSET_BY_MODEL)
def test_model_offset_applied_once(model_type, tmp_path):
    model, config, lm = _convert(model_type, tmp_path)
    assert position_offset(model) == 0  # the model adds its offset to given ids itself
    feeds = text_decoder_inputs(config, length=LENGTH)
    reference = hf_reference_feeds(model, feeds)
    assert ("position_ids" not in reference) == OFFSET_BY_MODEL[model_type]
    with torch.no_grad():
        expected = model(**reference).logits.numpy()
    steps = _prefill_then_each_token(lm, feeds)
    _assert_matches(steps, expected, feeds["attention_mask"].numpy())
