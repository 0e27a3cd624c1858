"""Caches carried through the trace by transformers' own Cache (mobius/synth/state.py).

One family per reason the captured attention cannot carry the cache: attention written out by
hand (gpt_neo, bloom), positions counted from the cache length (bart's decoder), recurrent state only
(mamba2), convolution state next to attention layers (lfm2_moe), models whose Python loops over
tokens are traced for one token and run in an ONNX Loop (mamba; jamba: left padding must reach the
recurrent layers token by token; zamba: per-head states written through no-op casts), and states
that are no transformers Cache (``state_adapters.py``: rwkv's ``state`` list, recurrent_gemma's
module attributes next to its attention cache; minimax's list of lightning-attention states on
the Cache object itself). Each is compared with eager
PyTorch on a prefill and a 3-token decode step, and with HF ``generate`` token for token.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import mobius
from mobius.testing.configs import tiny_config_for
from mobius.testing.parity import (
    OnnxCausalLM,
    causal_lm_parity,
    decoder_inputs,
    hf_feeds,
    hf_greedy,
)
from mobius.testing.tiny import randomize

ATOL = 1e-4
NEW_TOKENS = 16
# model type -> a state the cache must carry besides (or instead of) keys and values
FAMILIES = {
    "gpt_neo": "key",
    "bloom": "key",  # ALiBi, written out by hand
    "bart": "key",
    "mamba2": "recurrent_state",
    "mamba": "recurrent_state",
    "lfm2_moe": "conv_state",
    "jamba": "conv_state",
    "zamba": "recurrent_state",
    "rwkv": "state_2",
    "recurrent_gemma": "recurrent_states",
    "minimax": "linear_cache",  # lightning-attention states in a list on the Cache itself
}
# second representatives, run with ``-m sweep``: mamba2's mixer is carried with its cache in CI by
# granitemoehybrid (test_convert_breadth.py); zamba's Loop by mamba and jamba here, its writes
# through no-op casts by synth/test_view_writes.py
SWEEP = {"mamba2", "zamba"}
CASES = [pytest.param(t, marks=pytest.mark.sweep) if t in SWEEP else t for t in FAMILIES]


# model type -> why HF ``generate`` is no reference for it: greedy decoding over the full forward is
FULL_FORWARD_GREEDY = {
    # its single-token branch broadcasts [batch, hidden] over [batch, 1, hidden] (synth/overrides.py)
    "rwkv": "HF's cached decode is wrong for a batch over 1",
}


def full_forward_greedy(model, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int):
    """Greedy tokens from the full forward over the whole sequence at every step (no cache)."""
    picked = []
    with torch.no_grad():
        for _ in range(new_tokens):
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
            token = model(**hf_feeds(model, feeds)).logits[:, -1].argmax(-1, keepdim=True)
            picked.append(token)
            ids, mask = torch.cat([ids, token], 1), torch.cat([mask, torch.ones_like(token)], 1)
    return torch.cat(picked, 1).numpy()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    done: dict[str, tuple] = {}

    def get(model_type: str):
        if model_type not in done:
            config = tiny_config_for(model_type)
            torch.manual_seed(0)
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
            randomize(model, seed=0)
            root = tmp_path_factory.mktemp(model_type)
            model.save_pretrained(root / "hf")
            package = mobius.build(root / "hf")
            out = package.save(root / "onnx")
            done[model_type] = (out, model, config, package)
        return done[model_type]

    return get


@pytest.mark.parametrize("model_type", CASES)
def test_prefill_and_decode_step_match_pytorch(model_type, built):
    out, model, config, _ = built(model_type)
    diffs = causal_lm_parity(model, out, config)
    assert diffs["cache"], "the model was built without a cache"
    assert diffs["prefill_diff"] <= ATOL
    assert diffs["decode_diff"] <= ATOL


@pytest.mark.parametrize("model_type", CASES)
def test_greedy_generation_matches_hf(model_type, built):
    out, model, config, _ = built(model_type)
    feeds = decoder_inputs(config.vocab_size)
    greedy = full_forward_greedy if model_type in FULL_FORWARD_GREEDY else hf_greedy
    expected = greedy(model, feeds["input_ids"], feeds["attention_mask"], NEW_TOKENS)
    lm = OnnxCausalLM(out)
    actual = lm.generate(feeds["input_ids"].numpy(), feeds["attention_mask"].numpy(), NEW_TOKENS)
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("model_type", CASES)
def test_cache_contract_and_explain(model_type, built):
    out, _, config, _ = built(model_type)
    lm = OnnxCausalLM(out)
    state = FAMILIES[model_type]
    assert any(n.endswith(f".{state}") for n in lm.cache_names), lm.cache_names
    presents = {n for n in lm.output_names if n.startswith("present.")}
    assert presents == {n.replace("past_key_values.", "present.", 1) for n in lm.cache_names}
    # a recurrent state has a fixed size: only the batch axis is named
    for name in lm.cache_names:
        shape = lm.inputs[name].shape
        growing = name.endswith((".key", ".value"))
        assert [isinstance(d, str) for d in shape] == [True, False, growing, False][: len(shape)]
    # onnxruntime-genai drives key/value caches only (mobius/runtime/genai.py)
    only_keys_and_values = all(n.endswith((".key", ".value")) for n in lm.cache_names)
    assert (out / "genai_config.json").is_file() == only_keys_and_values
    summary = json.loads((out / "explain.json").read_text())["summary"]
    assert summary["kv_cache"] and summary["cache_layers"] == config.num_hidden_layers
    assert any(g["kind"] == "cache" and g["subject"] == "traced" for g in summary["gaps"])


def test_the_build_says_why_it_carries_the_cache_in_the_trace(checkpoints, caplog, tmp_path):
    directory, _, _ = checkpoints.get("bloom")
    with caplog.at_level("INFO", logger="mobius"):
        mobius.build(directory, weights=False)
    assert (
        "fallback: the cache is carried through the trace, attention lowered op by op "
        "(costs fused attention): attention not captured in"
    ) in caplog.text
    assert "transformer.h.0.self_attention" in caplog.text  # names the modules
