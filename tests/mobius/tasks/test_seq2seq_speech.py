"""Speech encoder–decoders whose encoder input is not token ids (CONTRACTS.md, "Encoder–decoder
tasks"): Pop2Piano's forward takes ``input_features`` ``[batch, frames, d_model]`` and hands them
to its T5 encoder as embeddings, padded by their ``attention_mask``. Moonshine Streaming takes
raw ``input_values``; its decoder writes into the encoder states it is given."""

from __future__ import annotations

import onnx
import pytest

import mobius
from mobius.testing.seq2seq import seq2seq_parity, tiny_seq2seq

ATOL = 1e-4


@pytest.fixture(scope="module")
def pop2piano(tmp_path_factory):
    root = tmp_path_factory.mktemp("pop2piano")
    model, _ = tiny_seq2seq("pop2piano", root / "hf")
    out = mobius.build(root / "hf").save(root / "onnx")
    return model, out


def test_pop2piano_encoder_takes_padded_features(pop2piano):
    model, out = pop2piano
    graph = onnx.load(out / "encoder_model.onnx", load_external_data=False).graph
    shapes = {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in graph.input
    }
    assert shapes == {
        "input_features": ["batch", "num_frames", model.config.d_model],
        "attention_mask": ["batch", "num_frames"],
    }
    diffs = seq2seq_parity(model, out)  # the second row's last 3 frames are padding
    worst = max(v for k, v in diffs.items() if k.endswith("_diff"))
    assert worst <= ATOL, diffs
    assert diffs["tokens_equal"]


def test_encoder_output_is_not_what_the_decoder_added_in_place(tmp_path):
    """Moonshine Streaming's decoder adds its position table to the encoder states in place
    (``encoder_hidden_states += ...``): the encoder graph returns the encoder's own states, and
    the cross keys and values what the decoder made of them."""
    model, _ = tiny_seq2seq("moonshine_streaming", tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    diffs = seq2seq_parity(model, out, new_tokens=4)
    worst = max(v for k, v in diffs.items() if k.endswith("_diff"))
    assert worst <= ATOL, diffs
    assert diffs["tokens_equal"]
