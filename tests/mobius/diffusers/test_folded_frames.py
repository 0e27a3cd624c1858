"""Frames folded into the batch with ``num_frames`` a Python int (``mobius/diffusers/folded_frames.py``):
the graph takes the input unfolded, ``[batch, num_frames, channels, height, width]``, and gives
the output so; batch and frame count stay dynamic (9 and 13 frames fed, 5 traced)."""

from __future__ import annotations

import onnxruntime as ort

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def test_folded_frames_are_unfolded_at_the_graph_edge(tmp_path):
    model, out = convert("TransformerTemporalModel", tmp_path)
    session = ort.InferenceSession(str(out / "model.onnx"))
    (given,) = session.get_inputs()
    assert (given.name, given.shape) == ("hidden_states", ["batch", "num_frames", 8, "height",
                                                           "width"])  # fmt: skip
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs
