"""Models with images and audio (``modality.py``; ``audio_llm.py`` with both modalities): a tiny
Qwen2.5-Omni thinker converts, with no --task, to a vision and an audio encoder, one embedding
graph taking both feature inputs, and the decoder; parity with PyTorch on one image and two clips
of different lengths in a padded batch of two; detection never gives one encoder alone."""

from __future__ import annotations

import json

import pytest
import torch

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.sources.config import from_hf
from mobius.tasks.detect import detect_task, get_task
from mobius.tasks.modality import place_features, scatter_features
from mobius.testing.omni import omni_parity, tiny_omni

ATOL = 1e-4
TYPE = "qwen2_5_omni_thinker"


def test_each_modality_lands_at_its_own_token():
    """Two modalities in one embedding: each modality's rows where HF's two ``masked_scatter``
    calls put them, whichever goes first."""
    torch.manual_seed(0)
    embed = torch.nn.Embedding(10, 4)
    ids = torch.tensor([[1, 7, 8, 7, 2], [8, 8, 3, 7, 0]])
    image, audio = torch.randn(3, 4), torch.randn(3, 4)
    with torch.no_grad():
        expected = embed(ids).masked_scatter((ids == 7)[..., None], image)
        expected = expected.masked_scatter((ids == 8)[..., None], audio)
        image_first = place_features(scatter_features(embed, ids, image, 7), ids, audio, 8)
        audio_first = place_features(scatter_features(embed, ids, audio, 8), ids, image, 7)
    assert torch.equal(image_first, expected) and torch.equal(audio_first, expected)


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    """A tiny Qwen2.5-Omni thinker converted once through the CLI: (HF model, output dir)."""
    root = tmp_path_factory.mktemp("omni")
    model, _ = tiny_omni(TYPE, root / "checkpoint")
    out = root / "onnx"
    assert main(["build", "--model", str(root / "checkpoint"), "--output", str(out), "-q"]) == 0
    return model, out


def test_both_encoders_and_one_embedding(thinker):
    model, out = thinker
    manifest = json.loads((out / "mobius.json").read_text())
    graphs = manifest["graphs"]
    assert set(graphs) == {
        "vision_encoder.onnx",
        "audio_encoder.onnx",
        "embedding.onnx",
        "decoder_model.onnx",
    }
    assert graphs["vision_encoder.onnx"]["outputs"] == ["image_features"]
    assert graphs["audio_encoder.onnx"] == {
        "inputs": ["input_features", "feature_attention_mask"],
        "outputs": ["audio_features"],
    }
    assert graphs["embedding.onnx"] == {
        "inputs": ["input_ids", "image_features", "audio_features"],
        "outputs": ["inputs_embeds"],
    }
    assert graphs["decoder_model.onnx"]["inputs"][0] == "inputs_embeds"
    assert manifest["task"] == "audio-text-to-text"
    assert manifest["layout"] == "audio-llm"
    assert manifest["modalities"] == ["image", "audio"]
    assert manifest["image_token_id"] == model.config.image_token_id
    assert manifest["audio_token_id"] == model.config.audio_token_id
    assert manifest["position_ids"] == "multi-axis"


def test_parity_with_pytorch(thinker):
    model, out = thinker
    result = omni_parity(model, out)
    assert result["image_tokens"] > 0 and result["audio_tokens"] > 0
    assert result["image_features_diff"] < ATOL
    assert result["audio_features_diff"] < ATOL
    assert result["prefill_diff"] < ATOL
    assert result["decode_diff"] < ATOL
    assert result["generate_logits_diff"] < ATOL
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])


def test_detection_gives_both_and_the_image_task_only_when_asked(thinker, caplog):
    """No --task: both encoders. ``--task image-text-to-text`` converts the image path alone, as
    asked, and says the audio is left out; a task with neither encoder is refused."""
    model, _ = thinker
    arch = from_hf(model.config)
    assert detect_task(arch).name == "audio-text-to-text"
    with caplog.at_level("WARNING", logger="mobius"):
        task = get_task("image-text-to-text", arch)
    assert task.name == "image-text-to-text" and "without its audio path" in caplog.text
    assert [graph.name for graph in task.graphs][0] == "vision_encoder"
    with pytest.raises(ConfigError, match="without its audio path"):
        get_task("text-generation", arch)
