"""A VAE decoder that samples (ConsistencyDecoderVAE, ``mobius/diffusers/sampling.py``): its
noise draws are the decoder graph's ``noise`` input, and with the same draws the graph matches
diffusers' own decode at atol 1e-4 at two size sets."""

from __future__ import annotations

import json

import onnxruntime as ort
import pytest
import torch

from mobius.diffusers.components import component_tasks
from mobius.diffusers.sampling import SAMPLING_DECODERS, drawing_from
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert("ConsistencyDecoderVAE", tmp_path_factory.mktemp("consistency"))


def test_decoder_takes_its_noise_and_matches_pytorch(converted):
    model, out = converted
    manifest = json.loads((out / "vae_decoder" / "mobius.json").read_text())
    assert manifest["graphs"]["model.onnx"]["inputs"] == ["latent_sample", "noise"]
    noise = ort.InferenceSession(str(out / "vae_decoder" / "model.onnx")).get_inputs()[1]
    assert noise.shape[0] == 2 and noise.shape[2] == 3
    assert all(isinstance(d, str) for d in (noise.shape[1], *noise.shape[3:]))
    diffs = max_diffs(model, out)
    assert len(diffs) == 4  # encoder and decoder at two size sets
    assert max(diffs.values()) < ATOL, diffs


def test_every_draw_is_taken(converted):
    """Draws the model does not take, more draws than given, or draws of another size than the
    model asks for are an error, not a quiet mismatch."""
    model, _ = converted
    decoder = component_tasks("ConsistencyDecoderVAE")[1]
    latent = torch.randn(1, 4, 4, 4)
    for count in (1, 3):
        noise = torch.randn(count, 1, 3, 16, 16)
        with pytest.raises(ValueError, match="draw"), torch.no_grad():
            decoder.call(model, {"latent_sample": latent, "noise": noise})
    # draws of a size that would broadcast (one row for a batch of two, one channel for three)
    for noise in (torch.randn(2, 1, 3, 16, 16), torch.randn(2, 2, 1, 16, 16)):
        with pytest.raises(ValueError, match="the decoder draws"), torch.no_grad():
            decoder.call(model, {"latent_sample": latent.expand(2, -1, -1, -1), "noise": noise})
    modules = SAMPLING_DECODERS["ConsistencyDecoderVAE"].modules
    with drawing_from(torch.zeros(0, 1), modules):
        pass  # no draws given, none taken
