"""HiDream-I1 (``mobius/diffusers/overrides/hidream.py``): square and non-square latents, which
diffusers patchifies differently (non-square ones padded to ``max_resolution``'s token count),
in one graph whose padding is one token weighted by the padding's count. Converted with the CLI
and matching PyTorch at atol 1e-4 at the two (non-square) size sets and at a square grid."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import torch

from mobius.diffusers.components import component_tasks
from mobius.diffusers.config import architecture
from mobius.verification.diffusers_feeds import SIZE_SETS, feeds
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def test_square_and_padded_grids_match_pytorch(tmp_path):
    model, out = convert("HiDreamImageTransformer2DModel", tmp_path)
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert graph["inputs"] == [
        "hidden_states", "timesteps", "encoder_hidden_states_t5", "encoder_hidden_states_llama3",
        "pooled_embeds",
    ]  # fmt: skip
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs

    (task,) = component_tasks("HiDreamImageTransformer2DModel")
    arch = architecture({"_class_name": type(model).__name__, **model.config})
    session = ort.InferenceSession(str(out / "model.onnx"))
    inputs = feeds(task, arch, session, run_sizes=SIZE_SETS[0] | {"height": 16, "width": 16})
    with torch.no_grad():
        (expected,) = task.call(model, dict(inputs))
    (got,) = session.run(None, {k: v.numpy() for k, v in inputs.items()})
    assert got.shape == (3, 4, 16, 16)
    assert float(np.abs(expected.numpy() - got).max()) < ATOL
