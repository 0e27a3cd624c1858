"""GLM-Image's transformer: one prior token per patch of the unpacked latents (``patch_count``)
and ``prior_token_drop``, whose boolean-mask write (``embedding[drop] *= 0``) the trace keeps as
an elementwise select. Converted with the CLI and matching PyTorch at atol 1e-4 at two size sets,
and dropping one token's prior changes only its own row of the graph's output."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert("GlmImageTransformer2DModel", tmp_path_factory.mktemp("glm"))


def test_prior_tokens_match_pytorch(converted):
    model, out = converted
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert {"prior_token_id", "prior_token_drop"} <= set(graph["inputs"])
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs


def test_dropping_a_prior_changes_its_row_only(converted):
    model, out = converted
    session = ort.InferenceSession(str(out / "model.onnx"))
    rng = np.random.default_rng(0)
    patches = (8 // 2) * (12 // 2)
    feeds = {
        "hidden_states": rng.standard_normal((2, 4, 8, 12)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "prior_token_id": rng.integers(0, 16, (2, patches)),
        "timestep": np.array([3.0, 500.0], np.float32),
        "target_size": np.full((2, 2), 64.0, np.float32),
        "crop_coords": np.zeros((2, 2), np.float32),
    }
    kept = session.run(None, feeds | {"prior_token_drop": np.zeros((2, patches), bool)})[0]
    drop = np.zeros((2, patches), bool)
    drop[0, 3] = True
    dropped = session.run(None, feeds | {"prior_token_drop": drop})[0]
    assert np.abs(kept - dropped)[0].max() > 1e-3  # row 0 sees its prior dropped
    assert np.abs(kept - dropped)[1].max() == 0.0  # row 1 does not
