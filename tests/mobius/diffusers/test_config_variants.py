"""Configs that trace differently from their class's usual one: a ControlNet whose conditioning
embedding downsamples twice (the conditioning image 4x the latents, not 8x), Wan with a rotary
table of 32 positions (the size range kept and checked in the graph), and a Transformer2DModel
without adaptive norms (its ``timestep`` is read by nothing, so it is no graph input). Each
matches PyTorch at atol 1e-4 at two size sets."""

from __future__ import annotations

import json

import onnxruntime as ort
import pytest

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

CONTROLNET = "ControlNetModel (conditioning embedding of 3 levels)"
WAN = "WanTransformer3DModel (rotary table of 32)"
NO_TIMESTEP = "Transformer2DModel (layer norm, no timestep)"


@pytest.mark.parametrize("label", [CONTROLNET, WAN, NO_TIMESTEP])
def test_variant_matches_pytorch(label, tmp_path):
    model, out = convert(label, tmp_path)
    diffs = max_diffs(model, out)
    assert max(diffs.values()) < ATOL, diffs
    manifest = json.loads((out / "mobius.json").read_text())
    inputs = next(iter(manifest["graphs"].values()))["inputs"]
    if label == NO_TIMESTEP:
        assert inputs == ["hidden_states", "encoder_hidden_states"]
    if label == WAN:  # past the table (32 patches of 2 latents on a side) the graph stops
        assert [f["kind"] for f in manifest["fallbacks"]] == ["length-bound"]
        session = ort.InferenceSession(str(out / "model.onnx"))
        import numpy as np

        feed = {i.name: np.zeros([2 if isinstance(d, str) else d for d in i.shape], np.float32)
                for i in session.get_inputs()}  # fmt: skip
        feed["hidden_states"] = np.zeros((1, 4, 1, 8, 80), np.float32)
        feed["timestep"] = np.zeros((1,), np.float32)
        feed["encoder_hidden_states"] = np.zeros((1, 3, 12), np.float32)
        with pytest.raises(Exception, match="(?i)gather|index"):
            session.run(None, feed)
