"""A tiny Stable Diffusion pipeline (CLIP text encoder, UNet, VAE, Euler scheduler; every
parameter random) converted with one CLI call: each component matches PyTorch at atol 1e-4 at
several batch sizes and resolutions, and ``examples/diffusion_pipeline.py`` (onnxruntime sessions
driven by the diffusers scheduler) gives the diffusers pipeline's image within 1e-3."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from mobius.cli import main
from mobius.testing.diffusers_tiny import tiny_pipeline

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "diffusion_pipeline.py"
ATOL = 1e-4


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("sd")
    pipe = tiny_pipeline(root / "pipeline")
    out = root / "onnx"
    assert main(["build", "--model", str(root / "pipeline"), "--output", str(out), "-q"]) == 0
    return pipe, out


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])


def test_layout_and_contract_names(converted):
    _, out = converted
    graphs = json.loads((out / "mobius.json").read_text())["graphs"]
    assert graphs["unet/model.onnx"] == {
        "inputs": ["sample", "timestep", "encoder_hidden_states"],
        "outputs": ["out_sample"],
    }
    assert graphs["vae_encoder/model.onnx"]["outputs"] == ["latent_parameters"]
    assert graphs["vae_decoder/model.onnx"] == {"inputs": ["latent_sample"], "outputs": ["sample"]}
    assert graphs["text_encoder/model.onnx"] == {
        "inputs": ["input_ids"],
        "outputs": ["last_hidden_state", "pooler_output"],
    }
    assert (out / "scheduler" / "scheduler_config.json").is_file()
    assert (out / "tokenizer" / "vocab.json").is_file()
    assert (out / "model_index.json").is_file()
    unet = json.loads((out / "unet" / "mobius.json").read_text())
    assert unet["model_type"] == "UNet2DConditionModel" and unet["component"] == "unet"


@pytest.mark.parametrize(("batch", "height", "width"), [(1, 8, 8), (3, 16, 24)])
def test_unet_matches_pytorch(converted, batch, height, width):
    pipe, out = converted
    gen = torch.Generator().manual_seed(batch)
    sample = torch.randn(batch, 4, height, width, generator=gen)
    timestep = torch.tensor([1.0, 40.5, 99.0][:batch])
    text = torch.randn(batch, 5, 16, generator=gen)
    with torch.no_grad():
        expected = pipe.unet(sample, timestep, text).sample.numpy()
    feeds = {"sample": sample, "timestep": timestep, "encoder_hidden_states": text}
    got = session(out / "unet").run(None, {k: v.numpy() for k, v in feeds.items()})[0]
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("batch", "height", "width"), [(1, 16, 16), (2, 24, 32)])
def test_vae_matches_pytorch(converted, batch, height, width):
    pipe, out = converted
    gen = torch.Generator().manual_seed(batch)
    image = torch.randn(batch, 3, height, width, generator=gen)
    latents = torch.randn(batch, 4, height // 2, width // 2, generator=gen)
    with torch.no_grad():
        parameters = pipe.vae.encode(image).latent_dist.parameters.numpy()
        decoded = pipe.vae.decode(latents).sample.numpy()
    got = session(out / "vae_encoder").run(None, {"sample": image.numpy()})[0]
    np.testing.assert_allclose(got, parameters, atol=ATOL, rtol=0)
    got = session(out / "vae_decoder").run(None, {"latent_sample": latents.numpy()})[0]
    np.testing.assert_allclose(got, decoded, atol=ATOL, rtol=1e-3)


def test_text_encoder_matches_pytorch(converted):
    pipe, out = converted
    ids = torch.tensor([[0, 5, 9, 33, 1, 1], [0, 7, 1, 1, 1, 1]])
    with torch.no_grad():
        expected = pipe.text_encoder(ids)
    got = session(out / "text_encoder").run(None, {"input_ids": ids.numpy()})
    np.testing.assert_allclose(got[0], expected.last_hidden_state.numpy(), atol=ATOL, rtol=0)
    np.testing.assert_allclose(got[1], expected.pooler_output.numpy(), atol=ATOL, rtol=0)


def test_four_steps_give_the_diffusers_image(converted):
    pipe, out = converted
    spec = importlib.util.spec_from_file_location("diffusion_pipeline", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    latents = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    got = example.generate(out, "a red cube", latents.clone(), steps=4)
    expected = pipe(
        "a red cube", num_inference_steps=4, guidance_scale=7.5, latents=latents.clone(),
        output_type="np", height=16, width=16,
    ).images  # fmt: skip
    assert got.shape == expected.shape == (1, 16, 16, 3)
    assert np.abs(got - expected).max() < 1e-3
    assert got.std() > 0.01  # an image, not a constant


def test_explain_a_pipeline_component(converted, tmp_path):
    """``explain`` on one component of a pipeline (``--component vae_decoder`` picks one graph):
    GroupNorm and diffusers' attention are components."""
    _, out = converted
    report = tmp_path / "explain.json"
    source = out.parent / "pipeline"
    code = main(["explain", "--model", str(source), "--component", "vae_decoder", "-q",
                 "--json", str(report)])  # fmt: skip
    assert code == 0
    components = {
        use["component"]
        for module in json.loads(report.read_text())["modules"]
        for use in module.get("components", [])
    }
    assert {"GroupNormalization", "Attention"} <= components


def test_float16_unet_is_as_close_to_float64_as_pytorchs(converted, tmp_path):
    """``--dtype f16``: the UNet's weights, activations and I/O in float16 (timestep stays
    float32). The tolerance comes from a float64 reference: onnxruntime's float16 graph may be
    off it by at most twice what PyTorch's own float16 UNet is (max abs, at 2e-3 here)."""
    pipe, out = converted
    code = main(["build", "--model", str(out.parent / "pipeline"), "--component", "unet",
                 "--dtype", "f16", "--output", str(tmp_path / "unet"), "-q"])  # fmt: skip
    assert code == 0
    gen = torch.Generator().manual_seed(0)
    sample, text = torch.randn(2, 4, 16, 24, generator=gen), torch.randn(2, 5, 16, generator=gen)
    timestep = torch.tensor([1.0, 40.5])
    with torch.no_grad():
        exact = pipe.unet.double()(sample.double(), timestep.double(), text.double()).sample
        half = pipe.unet.half()(sample.half(), timestep, text.half()).sample.double()
        pipe.unet.float()
    feeds = {"sample": sample.half().numpy(), "timestep": timestep.numpy(),
             "encoder_hidden_states": text.half().numpy()}  # fmt: skip
    got = session(tmp_path / "unet").run(None, feeds)[0]
    assert got.dtype == np.float16
    torch_error = float((half - exact).abs().max())
    assert 0 < torch_error < 0.05
    assert float((torch.from_numpy(got).double() - exact).abs().max()) <= 2 * torch_error
