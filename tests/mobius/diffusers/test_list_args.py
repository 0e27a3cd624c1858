"""Forward arguments that are Python lists of per-sample tensors (``mobius/diffusers/
list_args.py``): Z-Image converted with one stacked tensor per list and a dynamic batch, matching
PyTorch run on the original lists at atol 1e-4 at the sweep's two size sets (batch 3 and 1) and
at a caption that crosses the model's 32-token padding."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


@pytest.fixture(scope="module")
def z_image(tmp_path_factory):
    return convert("ZImageTransformer2DModel", tmp_path_factory.mktemp("z_image"))


def test_stacked_lists_match_pytorch(z_image):
    model, out = z_image
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert (graph["inputs"], graph["outputs"]) == (["x", "t", "cap_feats"], ["out_sample"])
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs


def test_padding_follows_the_caption(z_image):
    """40 caption tokens pad to 64 (the trace's 7 padded to 32): the pad count is computed in
    the graph, not fixed; compared with the model called on lists, as its pipelines call it."""
    model, out = z_image
    session = ort.InferenceSession(str(out / "model.onnx"))
    gen = torch.Generator().manual_seed(3)
    x, caption = torch.randn(2, 4, 1, 16, 24, generator=gen), torch.randn(2, 40, 12, generator=gen)
    t = torch.rand(2, generator=gen)
    with torch.no_grad():
        expected = torch.stack(model(list(x.unbind(0)), t, list(caption.unbind(0))).sample)
    got = session.run(None, {"x": x.numpy(), "t": t.numpy(), "cap_feats": caption.numpy()})[0]
    assert got.shape == (2, 4, 1, 16, 24)
    assert np.abs(expected.numpy() - got).max() < ATOL


def test_grid_list_as_a_tensor_matches_pytorch(tmp_path):
    """JoyImage Edit Plus: shape_list, per row a Python list of (t, h, w) grids, is an int64
    input [batch, components, 3]; the sweep's rows (one padded, one full, a two-frame target with
    a (0, 0, 0) component) match the model called on the Python lists."""
    model, out = convert("JoyImageEditPlusTransformer3DModel", tmp_path)
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert graph["inputs"] == [
        "hidden_states", "timestep", "encoder_hidden_states", "encoder_hidden_states_mask",
        "shape_list",
    ]  # fmt: skip
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs
