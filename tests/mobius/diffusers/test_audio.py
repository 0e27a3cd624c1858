"""Audio latents: a waveform VAE (AutoencoderKLMiniMaxH3Audio) under the VAE contract with 1D
latents, ``sample`` ``[batch, 1, sample_length]`` -> ``latent_parameters`` (its mean and log
standard deviation made mean and log-variance) and ``latent_sample`` ``[batch, latent_channels,
sample_length]`` -> ``sample``, the length dynamic. Converted with the CLI, it matches PyTorch at
atol 1e-4 at the sweep's two size sets and at a length that is no whole number of hops: the
encoder pads it, and its hop of 8 divides the traced length, where diffusers' ``if`` skips the
padding (overrides/audio_padding.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch

from mobius.diffusers.components import component_tasks
from mobius.diffusers.config import architecture
from mobius.verification.diffusers_feeds import RUN_SIZES, feeds
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

LABEL = "AutoencoderKLMiniMaxH3Audio (hop of 8)"


def test_audio_vae_matches_pytorch_at_any_length(tmp_path):
    model, out = convert(LABEL, tmp_path)
    sessions = {g: ort.InferenceSession(str(out / g / "model.onnx"))
                for g in ("vae_encoder", "vae_decoder")}  # fmt: skip
    shapes = {
        g: ([(i.name, i.shape) for i in s.get_inputs()], [o.name for o in s.get_outputs()])
        for g, s in sessions.items()
    }
    assert shapes == {
        "vae_encoder": ([("sample", ["batch", 1, "sample_length"])], ["latent_parameters"]),
        "vae_decoder": ([("latent_sample", ["batch", 4, "sample_length"])], ["sample"]),
    }
    diffs = max_diffs(model, out)
    assert len(diffs) == 4  # two graphs, one output each, two size sets
    assert max(diffs.values()) < ATOL, diffs

    encoder = component_tasks(type(model).__name__)[0]
    arch = architecture({"_class_name": type(model).__name__, **model.config})
    inputs = feeds(
        encoder, arch, sessions["vae_encoder"], run_sizes=RUN_SIZES | {"sample_length": 43}
    )
    with torch.no_grad():
        (expected,) = encoder.call(model, dict(inputs))
    (got,) = sessions["vae_encoder"].run(None, {k: v.numpy() for k, v in inputs.items()})
    assert got.shape == expected.shape == (3, 8, 6)  # 43 samples padded to 48: 6 hops of 8
    assert np.abs(got - expected.numpy()).max() < ATOL
