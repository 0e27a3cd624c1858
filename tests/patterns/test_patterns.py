"""The fused graph for a Llama decoder: one Attention, a RotaryEmbedding per q and k, RMSNormalization."""

from __future__ import annotations

import mobius
from mobius.testing.graphs import ops_by_layer


def test_llama_layer_is_fused(checkpoints, tmp_path):
    directory, _, _ = checkpoints.get("llama")
    out = mobius.build(directory).save(tmp_path / "onnx")
    layers = ops_by_layer(out, r"model\.layers\.(\d+)")
    last = layers["model.layers.1"]  # layer 0 also holds the model-wide mask and rotary tables
    assert last["Attention"] == 1
    assert last["RotaryEmbedding"] == 2
    assert last["RMSNormalization"] == 2
    for leftover in (
        "Softmax",
        "Where",
        "ReduceMean",
        "Pow",
        "Sqrt",
        "Neg",
        "Concat",
        "Slice",
        "Trilu",
    ):
        assert last[leftover] == 0, (leftover, dict(last))
    assert sum(last.values()) <= 20, dict(last)
    model_level = layers["model"] + layers["model.layers.0"]
    assert model_level["Where"] <= 1  # the padding-aware causal mask is built once


def test_declines_are_recorded_with_reasons(checkpoints):
    directory, _, _ = checkpoints.get("gptj")  # GPT-J's interleaved rotary is not the llama layout
    package = mobius.build(directory)
    claims = package.model.meta["mobius.claims"]
    assert not [c for c in claims if c.pattern == "rotary"]
