"""Audio latents: a waveform VAE (AutoencoderOobleck) under the VAE contract with 1D latents,
``sample`` ``[batch, audio_channels, sample_length]`` -> ``latent_parameters`` and
``latent_sample`` ``[batch, latent_channels, sample_length]`` -> ``sample``, the length dynamic,
converted with the CLI and matching PyTorch at atol 1e-4 at two lengths other than the traced
one."""

from __future__ import annotations

import onnxruntime as ort

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def test_audio_vae_matches_pytorch_with_dynamic_length(tmp_path):
    model, out = convert("AutoencoderOobleck", tmp_path)
    shapes = {}
    for graph in ("vae_encoder", "vae_decoder"):
        session = ort.InferenceSession(str(out / graph / "model.onnx"))
        shapes[graph] = (
            [(i.name, i.shape) for i in session.get_inputs()],
            [o.name for o in session.get_outputs()],
        )
    assert shapes == {
        "vae_encoder": ([("sample", ["batch", 2, "sample_length"])], ["latent_parameters"]),
        "vae_decoder": ([("latent_sample", ["batch", 4, "sample_length"])], ["sample"]),
    }
    diffs = max_diffs(model, out)
    assert len(diffs) == 4  # two graphs, one output each, two size sets
    assert max(diffs.values()) < ATOL, diffs
