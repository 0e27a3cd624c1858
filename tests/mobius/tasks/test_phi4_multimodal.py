"""Phi-4-multimodal (``tasks/phi4_multimodal.py``: features methods for a model that embeds its
images and audio inside its forward): a tiny one converts, with no --task, to a vision and an
audio encoder under the processor's names, one embedding graph taking both feature inputs, and
the decoder; parity with PyTorch on one image of 2 x 3 padded crops and two clips in a padded
batch of two, the speech projection, and a clip longer than the conformer's 500-step window."""

from __future__ import annotations

import json

import pytest

from mobius.cli import main
from mobius.sources.config import from_hf
from mobius.tasks.detect import detect_task
from mobius.testing.omni import omni_parity, tiny_omni

ATOL = 1e-4


@pytest.fixture(scope="module")
def phi4(tmp_path_factory):
    """A tiny Phi-4-multimodal converted once through the CLI: (HF model, output dir)."""
    root = tmp_path_factory.mktemp("phi4")
    model, _ = tiny_omni("phi4_multimodal", root / "checkpoint")
    out = root / "onnx"
    assert main(["build", "--model", str(root / "checkpoint"), "--output", str(out), "-q"]) == 0
    return model, out


def test_both_encoders_under_the_processor_names(phi4):
    model, out = phi4
    assert detect_task(from_hf(model.config)).name == "audio-text-to-text"
    manifest = json.loads((out / "mobius.json").read_text())
    graphs = manifest["graphs"]
    assert graphs["vision_encoder.onnx"] == {
        "inputs": ["image_pixel_values", "image_sizes", "image_attention_mask"],
        "outputs": ["image_features"],
    }
    assert graphs["audio_encoder.onnx"] == {
        "inputs": [
            "audio_input_features",
            "audio_embed_sizes",
            "audio_attention_mask",
            "audio_projection_mode",
        ],
        "outputs": ["audio_features"],
    }
    assert graphs["embedding.onnx"] == {
        "inputs": ["input_ids", "image_features", "audio_features"],
        "outputs": ["inputs_embeds"],
    }
    assert manifest["layout"] == "audio-llm" and manifest["modalities"] == ["image", "audio"]
    assert manifest["image_token_id"] == model.config.vision_config.image_token_id
    assert manifest["audio_token_id"] == model.config.audio_config.audio_token_id
    assert manifest["position_ids"] == "sequence"


def test_parity_with_pytorch(phi4):
    model, out = phi4
    result = omni_parity(model, out)
    assert result["image_tokens"] > 0 and result["audio_tokens"] > 0
    assert result["image_features_diff"] < ATOL
    assert result["audio_features_diff"] < ATOL  # with images, as the prompt has one
    assert result["speech_features_diff"] < ATOL  # without images
    assert result["long_audio_features_diff"] < ATOL  # two 500-step windows
    assert result["prefill_diff"] < ATOL
    assert result["decode_diff"] < ATOL
    assert result["generate_logits_diff"] < ATOL
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])


def test_both_towers_without_any_features_method_are_refused(monkeypatch):
    """Without the audio features method mobius writes for it, Phi-4-multimodal is a model with
    both towers and no audio split: detection refuses it in one line rather than writing its
    text decoder alone."""
    from mobius.errors import UnsupportedError
    from mobius.tasks.audio_qwen2 import OWN_FEATURES
    from mobius.testing.configs import tiny_config_for
    from mobius.testing.phi4_multimodal import OVERRIDES

    monkeypatch.delitem(OWN_FEATURES, "Phi4MultimodalForCausalLM")
    arch = from_hf(tiny_config_for("phi4_multimodal", **OVERRIDES))
    with pytest.raises(UnsupportedError, match="takes images and audio"):
        detect_task(arch)
