"""LTX-2's diffusion video decoder (``overrides/ltx2_decoder.py``, ``sampling.py``): its
neighborhood window as a boolean mask equals flex attention's ``mask_mod`` where the window
shifts inward at the borders, and the decoder graph, fed the one noise draw diffusers takes,
matches diffusers' decode at two size sets with its video axes dynamic."""

from __future__ import annotations

import json

import onnxruntime as ort
import pytest
import torch
from diffusers.models.autoencoders import ltx2_diffusion_decoder
from torch.nn.attention.flex_attention import create_mask

from mobius.diffusers.overrides.ltx2_decoder import neighborhood_mask
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


@pytest.mark.parametrize(
    ("grid", "kernel"),
    [
        ((3, 5, 5), (3, 5, 5)),
        ((4, 6, 7), (3, 5, 3)),
        ((7, 5, 11), (5, 5, 5)),
        ((2, 3, 9), (1, 3, 4)),
    ],
)
def test_window_mask_is_flex_mask_mod(grid, kernel):
    tokens = grid[0] * grid[1] * grid[2]
    block_mask = ltx2_diffusion_decoder._neighborhood_block_mask(*grid, kernel, "cpu")
    expected = create_mask(block_mask.mask_mod, None, None, tokens, tokens, "cpu")[0, 0]
    assert torch.equal(neighborhood_mask(*grid, kernel, "cpu"), expected)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert("LTX2VideoDiffusionDecoderModel", tmp_path_factory.mktemp("ltx2_decoder"))


def test_decoder_takes_its_noise_and_matches_pytorch(converted):
    model, out = converted
    manifest = json.loads((out / "mobius.json").read_text())  # one graph: at the root
    assert manifest["task"] == "vae_decoder"
    assert manifest["graphs"]["model.onnx"]["inputs"] == ["latent_sample", "noise"]
    session = ort.InferenceSession(str(out / "model.onnx"))
    latents, noise = session.get_inputs()
    assert all(isinstance(d, str) for d in (latents.shape[0], *latents.shape[2:]))
    assert noise.shape[0] == 1 and noise.shape[2] == 3
    assert all(isinstance(d, str) for d in (noise.shape[1], *noise.shape[3:]))
    diffs = max_diffs(model, out)
    assert len(diffs) == 2  # the decoder (no encoder) at two size sets
    assert max(diffs.values()) < ATOL, diffs
