"""Encoders: bidirectional attention captured as one ONNX Attention per layer over the padding mask,
packed q/k/v, LayerNormalization and Gelu; calls the capture cannot express fall back with a reason."""

from __future__ import annotations

import collections
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import mobius
from mobius.testing.graphs import ops_by_layer
from mobius.testing.parity import encoder_inputs, max_abs_diff
from mobius.testing.tiny import make_checkpoint
from patterns.attention import mobius_attention_forward, single_graph_task

ATOL = 1e-4


def test_bert_layer_is_at_most_16_nodes(checkpoints, tmp_path):
    directory, model, config = checkpoints.get("bert")
    out = mobius.build(directory).save(tmp_path / "onnx")
    layers = ops_by_layer(out, r"layers?\.(\d+)")
    last = layers["layer.1"]  # layer 0 also holds the padding mask, built once for the model
    assert last["Attention"] == 1
    assert last["LayerNormalization"] == 2 and last["Gelu"] == 1
    assert last["Split"] == 1  # q, k and v from one packed MatMul
    for leftover in ("Softmax", "Transpose", "Reshape", "Where", "Erf", "ReduceMean", "Div"):
        assert last[leftover] == 0, (leftover, dict(last))
    assert sum(last.values()) <= 16, dict(last)
    assert sum(c["Where"] for c in layers.values()) == 1  # the padding mask
    assert max_abs_diff(model, out, config) <= ATOL


def test_fully_padded_row_stays_finite(checkpoints, tmp_path):
    directory, model, config = checkpoints.get("bert")
    out = mobius.build(directory).save(tmp_path / "onnx")
    feeds = encoder_inputs(config.vocab_size, ["token_type_ids"])
    feeds["attention_mask"][0] = 0  # a row with no real token at all
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    actual = sess.run(None, {k: v.numpy() for k, v in feeds.items()})[0]
    assert np.isfinite(actual).all()
    with torch.no_grad():
        expected = model(**feeds).last_hidden_state.numpy()
    assert np.abs(actual[1] - expected[1]).max() <= ATOL  # the other row is unaffected


@pytest.mark.parametrize("model_type", ["electra", "distilbert"])
def test_more_text_encoders_are_fused_with_parity(model_type, checkpoints, tmp_path):
    directory, model, config = checkpoints.get(model_type)
    out = mobius.build(directory).save(tmp_path / "onnx")
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert sum(n.op_type == "Attention" for n in graph.node) == config.num_hidden_layers
    assert max_abs_diff(model, out, config) <= ATOL


def test_vit_needs_no_mask(checkpoints, tmp_path):
    directory, model, config = checkpoints.get("vit")
    out = mobius.build(directory).save(tmp_path / "onnx")
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    attention = [n for n in graph.node if n.op_type == "Attention"]
    assert len(attention) == config.num_hidden_layers
    assert all(len(n.input) == 3 for n in attention)  # no padding input, no mask
    assert max_abs_diff(model, out, config) <= ATOL


def test_attention_outside_the_interface_is_lowered_op_by_op_with_a_reason(tmp_path):
    model, config = make_checkpoint("deberta-v2", tmp_path / "ckpt", intermediate_size=128)
    out = mobius.build(tmp_path / "ckpt").save(tmp_path / "onnx")
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert not [n for n in graph.node if n.op_type == "Attention"]
    gaps = json.loads((out / "explain.json").read_text())["summary"]["gaps"]
    reasons = [g["next_step"] for g in gaps if g["kind"] == "attention"]
    assert reasons and "lowered op by op" in reasons[0] and "AttentionInterface" in reasons[0]
    assert max_abs_diff(model, out, config) <= ATOL


@pytest.mark.parametrize("act, form", [("gelu_python", "Erf"), ("gelu_new", "Tanh")])
def test_written_out_gelu_becomes_one_gelu(act, form, tmp_path):
    model, config = make_checkpoint(
        "bert", tmp_path / "ckpt", intermediate_size=128, hidden_act=act
    )
    out = mobius.build(tmp_path / "ckpt").save(tmp_path / "onnx")
    ops = collections.Counter(
        n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node
    )
    assert ops["Gelu"] == config.num_hidden_layers and ops[form] == 0 and ops["Pow"] == 0
    assert max_abs_diff(model, out, config) <= ATOL


class Layer(torch.nn.Module):
    is_causal = False  # an encoder's self-attention; no layer_idx


def _qkv():
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(2, 4, 5, 16, generator=gen) for _ in range(3)]


def test_bidirectional_call_is_captured_in_a_single_graph_task():
    layer = Layer()
    q, k, v = _qkv()
    with single_graph_task(True):
        out, _ = mobius_attention_forward(layer, q, k, v, None, scaling=0.25)
    assert not hasattr(layer, "_mobius_declined")
    expected = torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v
    torch.testing.assert_close(out, expected.transpose(1, 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kwarg", ["position_bias", "head_mask"])
def test_unmodelled_arguments_still_decline_in_a_single_graph_task(kwarg):
    layer = Layer()
    q, k, v = _qkv()
    with single_graph_task(True):
        mobius_attention_forward(
            layer, q, k, v, None, scaling=0.25, **{kwarg: torch.zeros(2, 4, 5, 5)}
        )
    assert kwarg in layer._mobius_declined


def test_call_that_does_not_say_whether_it_is_causal_declines_in_a_single_graph_task():
    # transformers would default to causal, but under "mobius" no model-level mask says otherwise
    layer = torch.nn.Module()
    with single_graph_task(True):
        mobius_attention_forward(layer, *_qkv(), None, scaling=0.25)
    assert "whether it is causal" in layer._mobius_declined


@pytest.mark.parametrize("lengths, captured", [((5,), True), ((7, 9), False)])
def test_keys_must_be_positions_of_the_padded_input(lengths, captured):
    # audio: the mask covers samples, the keys are frames; it cannot be applied to them
    layer = Layer()
    with single_graph_task(True, lengths):
        mobius_attention_forward(layer, *_qkv(), None, scaling=0.25)
    assert hasattr(layer, "_mobius_declined") is not captured
