"""Speech LLMs: three graphs by the contract's names, parity with PyTorch on a tiny GLM-ASR
(audio features of two clips of different lengths, padded prefill, a cached step, 12 greedy
tokens), ``generate --audio`` through the model's own processor, the text-only decoder, and
detection."""

from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch

from mobius.cli import main
from mobius.sources.config import from_hf
from mobius.tasks.detect import detect_task, get_task
from mobius.testing.audio_llm import audio_parity, tiny_glmasr_with_processor
from mobius.testing.configs import tiny_config_for

ATOL = 1e-4


@pytest.fixture(scope="module")
def tiny_glmasr(tmp_path_factory):
    """A tiny GLM-ASR with a local processor, converted once through the CLI with no --task:
    (checkpoint directory, HF model, processor, output directory)."""
    root = tmp_path_factory.mktemp("glmasr")
    model, processor = tiny_glmasr_with_processor(root / "checkpoint")
    out = root / "onnx"
    assert main(["build", "--model", str(root / "checkpoint"), "--output", str(out), "-q"]) == 0
    return root / "checkpoint", model, processor, out


def test_three_graphs_by_the_contract(tiny_glmasr):
    _, model, _, out = tiny_glmasr
    manifest = json.loads((out / "mobius.json").read_text())
    graphs = manifest["graphs"]
    assert graphs["audio_encoder.onnx"] == {
        "inputs": ["input_features", "input_features_mask"],
        "outputs": ["audio_features"],
    }
    assert graphs["embedding.onnx"] == {
        "inputs": ["input_ids", "audio_features"],
        "outputs": ["inputs_embeds"],
    }
    decoder = graphs["decoder_model.onnx"]
    assert decoder["inputs"][:3] == ["inputs_embeds", "attention_mask", "position_ids"]
    assert "past_key_values.1.value" in decoder["inputs"] and "present.1.key" in decoder["outputs"]
    assert manifest["layout"] == "audio-llm" and manifest["modalities"] == ["audio"]
    assert manifest["task"] == "audio-text-to-text"  # not in the speech mapping
    assert manifest["audio_token_id"] == model.config.audio_token_id
    assert "onnxruntime-genai" in manifest["genai"] and not (out / "genai_config.json").exists()
    assert (out / "preprocessor_config.json").is_file() or (out / "processor_config.json").is_file()


def test_parity_with_pytorch(tiny_glmasr):
    _, model, _, out = tiny_glmasr
    result = audio_parity(model, out)
    assert result["audio_tokens"] > 0
    assert result["features_diff"] < ATOL
    assert result["prefill_diff"] < ATOL
    assert result["decode_diff"] < ATOL
    assert result["generate_logits_diff"] < ATOL
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])


def _wav(path, seconds: float, rate: int = 8000) -> None:
    """A random 16-bit mono clip (at another rate than the model's: resampled on reading)."""
    samples = np.random.default_rng(0).normal(0, 0.2, int(seconds * rate)).clip(-1, 1)
    with wave.open(str(path), "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(rate)
        clip.writeframes((samples * 32767).astype("<i2").tobytes())


def test_generate_audio_gives_hf_generate_tokens(tiny_glmasr, tmp_path, capsys):
    from mobius.runtime.audio_generate import greedy_tokens, processor_inputs
    from mobius.runtime.audio_llm import OnnxAudioLanguageModel
    from mobius.runtime.wav import read_wav
    from mobius.testing.vlm import hf_generate

    _, model, processor, out = tiny_glmasr
    _wav(tmp_path / "clip.wav", 1.3)
    inputs = processor_inputs(processor, read_wav(tmp_path / "clip.wav", 16000), "transcribe")
    assert int((inputs["input_ids"] == model.config.audio_token_id).sum()) > 0
    ours = list(greedy_tokens(OnnxAudioLanguageModel(out), inputs, 8))
    expected, _ = hf_generate(model, {k: torch.from_numpy(v) for k, v in inputs.items()}, 8)
    assert ours == expected[0].tolist()
    capsys.readouterr()
    args = ["generate", "--model", str(out), "--audio", str(tmp_path / "clip.wav"), "-q"]
    assert main([*args, "--prompt", "transcribe", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out.strip()  # the decoded text of those tokens, up to an EOS


def test_text_only_writes_the_decoder_alone(tiny_glmasr, tmp_path):
    checkpoint = tiny_glmasr[0]
    out = tmp_path / "text"
    args = ["build", "--model", str(checkpoint), "--output", str(out), "-q"]
    assert main([*args, "--features", "text-only"]) == 0
    manifest = json.loads((out / "mobius.json").read_text())
    assert list(manifest["graphs"]) == ["decoder_model.onnx"]
    assert manifest["graphs"]["decoder_model.onnx"]["inputs"][0] == "input_ids"


def test_a_task_without_the_audio_path_is_refused(tiny_glmasr, tmp_path, capsys):
    args = ["build", "--model", str(tiny_glmasr[0]), "--output", str(tmp_path / "x")]
    assert main([*args, "--task", "text-generation"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mobius: error: 'glmasr' is a speech LLM"), err
    assert "--features text-only" in err[0] and not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "model_type, task",
    [
        ("qwen2_audio", "audio-text-to-text"),
        ("audioflamingo3", "audio-text-to-text"),
        ("qwen3_asr", "automatic-speech-recognition"),  # in the speech mapping
        ("granite_speech", "automatic-speech-recognition"),  # encoder_config, no audio_config
        ("moss_transcribe_diarize", "audio-text-to-text"),  # in the causal-LM mapping too
    ],
)
def test_detected_from_the_architecture(model_type, task):
    arch = from_hf(tiny_config_for(model_type))
    assert detect_task(arch).name == task
    other = "audio-text-to-text" if task != "audio-text-to-text" else "automatic-speech-recognition"
    assert get_task(other, arch).name == other  # either audio name gives the three graphs


@pytest.mark.parametrize("model_type", ["kyutai_speech_to_text", "vibevoice_asr"])
def test_a_speech_model_of_another_form_is_refused_not_built_as_text(model_type):
    """Speech-to-text decoders without an audio tower feeding the embeddings (Kyutai reads codec
    tokens, VibeVoice a tokenizer's latents) were built as text-only graphs without a word; now
    detection refuses them, naming the explicit way to the decoder alone."""
    from mobius.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="--task text-generation converts its text decoder"):
        detect_task(from_hf(tiny_config_for(model_type)))


def test_per_clip_counts_are_audio_inputs_by_their_processor_names():
    """dots.ocr-3's features method takes each chunk's waveform samples (``chunk_sample_lengths``,
    its feature extractor's output): an int64 input per clip beside its mel-first features
    (``feature_size`` mel bins), in a package with its vision encoder."""
    from mobius.tasks.audio_inputs import audio_inputs
    from mobius.tasks.audio_llm import modalities

    arch = from_hf(tiny_config_for("dots3_note"))
    specs = {s.name: s for s in audio_inputs(arch)}
    audio = arch.hf_config.audio_config
    assert list(specs) == ["input_features", "chunk_sample_lengths"]
    assert specs["input_features"].dims[:2] == ("batch", audio.feature_size)
    assert specs["chunk_sample_lengths"].dtype == torch.int64
    assert specs["chunk_sample_lengths"].dims == ("batch",)
    assert [m.name for m in modalities(arch)] == ["image", "audio"]


def test_windowed_clips_take_window_rows_and_a_sample_mask_per_clip():
    """MOSS Transcribe's processor cuts each clip into windows (``audio_chunk_size`` samples):
    features and their frame mask have one row per window, ``padding_mask`` (which the head's
    features method forwards to the base model's) one row of raw samples per clip."""
    from mobius.tasks.audio_inputs import audio_inputs

    specs = {s.name: s for s in audio_inputs(from_hf(tiny_config_for("moss_transcribe_diarize")))}
    assert list(specs) == ["input_features", "input_features_mask", "padding_mask"]
    assert specs["input_features"].dims[0] == specs["input_features_mask"].dims[0]
    assert specs["input_features"].dims[0] == "audio_chunks"
    assert specs["padding_mask"].dims == ("audio_clips", "num_samples")
    assert specs["padding_mask"].dtype == torch.int64
