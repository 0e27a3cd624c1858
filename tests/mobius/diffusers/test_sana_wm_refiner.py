"""SANA-WM's refiner (``structured_args``): its (cos, sin) rotary table is the inputs
``video_rotary_emb.0`` and ``video_rotary_emb.1``, dynamic in batch and tokens, and the graph
fed the table its pipeline builds matches diffusers at two window sizes."""

from __future__ import annotations

import onnxruntime as ort
import pytest
import torch

from tests.mobius.diffusers.parity import ATOL, convert


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert("SanaWMLTX2RefinerTransformer3DModel", tmp_path_factory.mktemp("refiner"))


@pytest.mark.parametrize(("batch", "positions", "height", "width"),
                         [(1, [4, 5, 6], 4, 6), (3, [0, 1, 2, 3, 9], 3, 5)])  # fmt: skip
def test_pipeline_rotary_table_matches_pytorch(converted, batch, positions, height, width):
    model, out = converted
    session = ort.InferenceSession(str(out / "model.onnx"))
    names = [i.name for i in session.get_inputs()]
    assert names == ["hidden_states", "encoder_hidden_states", "timestep", "video_rotary_emb.0",
                     "video_rotary_emb.1", "encoder_attention_mask"]  # fmt: skip
    gen = torch.Generator().manual_seed(len(positions))
    tokens = len(positions) * height * width
    cos, sin = model.build_rotary_emb_for_absolute_positions(
        batch, positions, height, width, "cpu", 24.0
    )
    mask = torch.ones(batch, 6, dtype=torch.bool)
    mask[0, -2:] = False
    feed = {
        "hidden_states": torch.randn(batch, tokens, 8, generator=gen),
        "encoder_hidden_states": torch.randn(batch, 6, 12, generator=gen),
        "timestep": torch.rand(batch, tokens, generator=gen) * 1000,
        "video_rotary_emb.0": cos,
        "video_rotary_emb.1": sin,
        "encoder_attention_mask": mask,
    }
    with torch.no_grad():
        expected = model(
            feed["hidden_states"], feed["encoder_hidden_states"], feed["timestep"], (cos, sin),
            encoder_attention_mask=mask,
        ).sample  # fmt: skip
    (got,) = session.run(None, {k: v.numpy() for k, v in feed.items()})
    assert float((expected - torch.from_numpy(got)).abs().max()) < ATOL
