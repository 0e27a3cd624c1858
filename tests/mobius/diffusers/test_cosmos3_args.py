"""Cosmos 3's omni transformer (``mobius/diffusers/cosmos3_args.py``): one vision item per call,
its latents and noisy frames as the lists' members (``vision_tokens.0``,
``vision_noisy_frame_indexes.0``; out ``sample.0``), the packed layout (prefix length, grid, sequence
indexes, the noisy patches read back) derived in the graph. It matches PyTorch's forward called
with the pipeline's lists and Python ints at atol 1e-4, at the sweep's size sets and at odd latent
sides (padded to whole patches) with every frame noisy."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
import torch

from mobius.diffusers.cosmos3_args import NOISY, NOISY_FRAMES, TOKENS, pipeline_layout
from mobius.diffusers.tasks import FRAMES, HEIGHT, WIDTH
from mobius.tasks.base import SEQUENCE
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

LABEL = "Cosmos3OmniTransformer"


@pytest.fixture(scope="module")
def cosmos3(tmp_path_factory):
    return convert(LABEL, tmp_path_factory.mktemp("cosmos3"))


def test_one_item_matches_pytorch(cosmos3):
    model, out = cosmos3
    diffs = max_diffs(model, out)
    assert diffs and max(diffs.values()) < ATOL, diffs


def test_odd_sides_every_frame_noisy(cosmos3):
    """The pipeline's call written out (lists of one item, its ints and index ranges) at latents
    of odd height and width, text-to-video (no conditioning frame)."""
    model, out = cosmos3
    gen = torch.Generator().manual_seed(3)
    text, frames, height, width = 4, 3, 5, 7
    rows, cols = math.ceil(height / 2), math.ceil(width / 2)
    sizes = {SEQUENCE: text, FRAMES: frames, HEIGHT: height, WIDTH: width, NOISY_FRAMES: frames}
    layout = pipeline_layout(dict(model.config), sizes, gen)
    noisy = layout[NOISY]
    assert noisy.tolist() == list(range(frames))
    feeds = {
        "input_ids": torch.randint(0, 32, (text,), generator=gen),
        TOKENS: torch.randn(1, 3, frames, height, width, generator=gen),
        **layout,
    }
    patches = frames * rows * cols
    with torch.no_grad():
        expected = model(
            input_ids=feeds["input_ids"], text_indexes=torch.arange(text),
            position_ids=feeds["position_ids"], und_len=text, sequence_length=text + patches,
            vision_tokens=[feeds[TOKENS]], vision_token_shapes=[(frames, rows, cols)],
            vision_sequence_indexes=torch.arange(text, text + patches),
            vision_mse_loss_indexes=torch.arange(text, text + patches),
            vision_timesteps=feeds["vision_timesteps"], vision_noisy_frame_indexes=[noisy],
            return_dict=False,
        )[0][0]  # fmt: skip
    folder = out / "transformer" if (out / "transformer").is_dir() else out
    session = ort.InferenceSession(str(folder / "model.onnx"))
    names = {i.name for i in session.get_inputs()}
    assert names == set(feeds), names
    (got,) = session.run(None, {k: v.numpy() for k, v in feeds.items()})
    assert [o.name for o in session.get_outputs()] == ["sample.0"]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected.numpy(), atol=ATOL, rtol=0)
