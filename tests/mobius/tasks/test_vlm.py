"""Image-text-to-text: three graphs by the contract's names, parity with PyTorch on a tiny LLaVA
(features, prefill with one image in a batch of two, a cached step, 12 greedy tokens), the
text-only decoder, and the task's detection."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mobius.cli import main
from mobius.sources.config import from_hf
from mobius.tasks.detect import detect_task
from mobius.testing.configs import tiny_config_for
from mobius.testing.vlm import vlm_parity

ATOL = 1e-4


def test_three_graphs_by_the_contract(tiny_llava_vlm):
    _, model, _, out = tiny_llava_vlm
    manifest = json.loads((out / "mobius.json").read_text())
    graphs = manifest["graphs"]
    assert graphs["vision_encoder.onnx"] == {
        "inputs": ["pixel_values"],
        "outputs": ["image_features"],
    }
    assert graphs["embedding.onnx"] == {
        "inputs": ["input_ids", "image_features"],
        "outputs": ["inputs_embeds"],
    }
    decoder = graphs["decoder_model.onnx"]
    assert decoder["inputs"][:3] == ["inputs_embeds", "attention_mask", "position_ids"]
    assert "past_key_values.1.value" in decoder["inputs"] and "present.1.key" in decoder["outputs"]
    assert manifest["task"] == "image-text-to-text"
    assert manifest["image_token_id"] == model.config.image_token_id
    # no onnxruntime-genai pipeline for LLaVA: said, not silently skipped
    assert "llava" in manifest["genai"] and not (out / "genai_config.json").exists()
    # and explain.json says it as a gap, with the same reason
    gaps = json.loads((out / "explain.json").read_text())["summary"]["gaps"]
    genai = [g for g in gaps if g["kind"] == "genai"]
    assert len(genai) == 1 and manifest["genai"] in genai[0]["next_step"]
    assert (out / "processor_config.json").is_file() and (out / "tokenizer.json").is_file()


def test_parity_with_pytorch(tiny_llava_vlm):
    _, model, _, out = tiny_llava_vlm
    result = vlm_parity(model, out)
    assert result["features_diff"] < ATOL
    assert result["prefill_diff"] < ATOL
    assert result["decode_diff"] < ATOL
    assert result["generate_logits_diff"] < ATOL
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])


def test_text_only_writes_the_decoder_alone(tiny_llava_vlm, tmp_path):
    checkpoint, model, _, _ = tiny_llava_vlm
    out = tmp_path / "text"
    args = ["build", "--model", str(checkpoint), "--output", str(out), "-q"]
    assert main([*args, "--features", "text-only"]) == 0
    manifest = json.loads((out / "mobius.json").read_text())
    assert list(manifest["graphs"]) == ["decoder_model.onnx"]
    assert manifest["graphs"]["decoder_model.onnx"]["inputs"][0] == "input_ids"
    assert json.loads((out / "genai_config.json").read_text())["model"]["type"] == "decoder"
    from mobius.runtime.vlm import OnnxVisionLanguageModel

    session = OnnxVisionLanguageModel(out).sessions["decoder_model"]
    ids = torch.randint(3, 500, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    feeds["position_ids"] = np.tile(np.arange(6), (2, 1))
    for i in range(2):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = np.zeros((2, 2, 0, 16), np.float32)
    logits = session.run(["logits"], feeds)[0]
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits.numpy()
    assert np.abs(logits - expected).max() < ATOL


def test_unknown_feature_is_refused(tiny_llava_vlm, tmp_path, capsys):
    checkpoint = tiny_llava_vlm[0]
    args = ["build", "--model", str(checkpoint), "--output", str(tmp_path / "x")]
    assert main([*args, "--features", "colour"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("mobius: error: unknown feature 'colour'; known features: text-only")


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("llava", "LlavaForConditionalGeneration"),
        ("gemma3", "Gemma3ForConditionalGeneration"),  # also in the causal-LM mapping
        ("qwen2_vl", "Qwen2VLForConditionalGeneration"),
    ],
)
def test_detected_from_the_architecture(model_type, architecture):
    config = tiny_config_for(model_type, architectures=[architecture])
    assert detect_task(from_hf(config)).name == "image-text-to-text"


def test_a_split_that_cannot_be_traced_names_the_text_only_way(tmp_path, capsys):
    """A HunyuanVL whose position table is resized bicubically keeps HF's per-image loop (the
    per-patch override covers bilinear resizes only), which the trace cannot follow: detected as
    image-text-to-text, the build is refused in one line that says how to convert its text
    decoder instead."""
    from mobius.testing.vlm import tiny_vlm

    tiny_vlm("hunyuan_vl", tmp_path / "ckpt", vision_config={"interpolate_mode": "bicubic"})
    capsys.readouterr()  # transformers' own progress output while saving
    args = ["build", "--model", str(tmp_path / "ckpt"), "--output", str(tmp_path / "onnx")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mobius: error: "), err
    assert err[0].endswith("; to convert its text decoder alone, pass --task text-generation")
    assert not (tmp_path / "onnx").exists()


@pytest.fixture(scope="module")
def tiny_qwen2_5_vl(tmp_path_factory):
    """A tiny Qwen2.5-VL (grid-driven vision tower with windows, multi-axis positions),
    converted once through the CLI: (HF model, output directory)."""
    from mobius.testing.vlm import tiny_vlm

    root = tmp_path_factory.mktemp("qwen2_5_vl")
    model, _ = tiny_vlm("qwen2_5_vl", root / "checkpoint")
    out = root / "onnx"
    assert main(["build", "--model", str(root / "checkpoint"), "--output", str(out), "-q"]) == 0
    return model, out


def test_grid_vision_and_multi_axis_positions(tiny_qwen2_5_vl):
    """The Qwen2-VL family: the vision graph takes the processor's ``image_grid_thw`` (patches of
    any number of images, windows clipped at the grid's edge), the decoder ``[3, batch, seq]``
    positions made by runtime/vlm.py's recipe; features, prefill, a step and 4 greedy tokens match
    PyTorch (which computes its positions itself)."""
    model, out = tiny_qwen2_5_vl
    manifest = json.loads((out / "mobius.json").read_text())
    assert manifest["graphs"]["vision_encoder.onnx"]["inputs"] == ["pixel_values", "image_grid_thw"]
    assert manifest["position_ids"] == "multi-axis"
    result = vlm_parity(model, out, new_tokens=4)
    assert result["features_diff"] < ATOL
    assert result["prefill_diff"] < ATOL
    assert result["decode_diff"] < ATOL
    assert result["generate_logits_diff"] < ATOL
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])
    # two images of other grids in one call: each image's rows as HF gives them
    from mobius.runtime.vlm import OnnxVisionLanguageModel

    grid = torch.tensor([[1, 4, 6], [1, 6, 4]])
    gen = torch.Generator().manual_seed(5)
    pixels = torch.randn(int(grid.prod(-1).sum()), 2 * 3 * 8 * 8, generator=gen)
    ours = OnnxVisionLanguageModel(out).image_features(
        pixel_values=pixels.numpy(), image_grid_thw=grid.numpy()
    )
    from mobius.tasks.vlm import image_features

    with torch.no_grad():
        expected = image_features(model, {"pixel_values": pixels, "image_grid_thw": grid})
    assert np.abs(ours - expected.numpy()).max() < ATOL
