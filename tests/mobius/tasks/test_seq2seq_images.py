"""Image encoder–decoders (image-text-to-text with ``is_encoder_decoder``) through the two-graph
encoder–decoder contract: the image into ``encoder_model.onnx`` under the HF forward's name. One
representative, ``VisionEncoderDecoderModel`` (a tiny ViT and a tiny BERT decoder); the sweep
(``benchmarks/seq2seq_coverage.py --image-text``) covers the other families."""

from __future__ import annotations

import json

import pytest

import mobius
from mobius.sources.config import from_hf
from mobius.tasks.detect import detect_task
from mobius.testing.configs import tiny_config_for
from mobius.testing.seq2seq import NEW_TOKENS, seq2seq_parity, tiny_seq2seq

ATOL = 1e-4


def test_vision_encoder_decoder_converts_as_two_graphs(tmp_path):
    one_layer = {"num_hidden_layers": 1}
    model, _ = tiny_seq2seq(
        "vision-encoder-decoder", tmp_path / "hf", encoder=one_layer, decoder=one_layer
    )
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    manifest = json.loads((out / "mobius.json").read_text())
    assert manifest["task"] == "image-text-to-text"
    assert manifest["layout"] == "encoder-decoder"
    assert manifest["decoder_start_token_id"] == model.config.decoder_start_token_id
    encoder = manifest["graphs"]["encoder_model.onnx"]
    assert encoder["inputs"] == ["pixel_values"]
    assert encoder["outputs"][:3] == [
        "last_hidden_state",
        "present.0.encoder.key",
        "present.0.encoder.value",
    ]
    decoder = manifest["graphs"]["decoder_model.onnx"]
    assert "encoder_attention_mask" not in decoder["inputs"]  # every image position is real
    diffs = seq2seq_parity(model, out)
    for name in ("encoder_diff", "prefill_diff", "decode_diff", "generate_logits_diff"):
        assert diffs[name] <= ATOL, name
    assert diffs["tokens"] == diffs["hf_tokens"]
    assert len(diffs["tokens"][0]) == NEW_TOKENS + 1


@pytest.mark.parametrize(
    "model_type", ["florence2", "pix2struct", "pp_formulanet", "vision-encoder-decoder"]
)
def test_image_encoder_decoders_take_the_two_graph_layout(model_type):
    task = detect_task(from_hf(tiny_config_for(model_type)))
    assert task.name == "image-text-to-text"
    assert [g.name for g in task.graphs] == ["encoder_model", "decoder_model"]


def test_image_sides_follow_the_encoders_own_vision_config():
    """T5Gemma 2 keeps its SigLIP config inside its encoder config: the encoder graph's image
    takes that config's sides (its position table holds that many patches), not symbolic ones
    the tower's fixed patch count would refuse."""
    from transformers import AutoModelForSeq2SeqLM

    from mobius.tasks.seq2seq_images import image_inputs

    config = tiny_config_for("t5gemma2", encoder={"mm_tokens_per_image": 4})
    vision = config.encoder.vision_config
    model = AutoModelForSeq2SeqLM.from_config(config)
    specs = {s.name: s.dims for s in image_inputs(from_hf(config), model)}
    side = vision.image_size
    assert specs["pixel_values"] == ("batch", vision.num_channels, side, side)
    assert specs["input_ids"] == specs["attention_mask"] == ("batch", "encoder_sequence_length")


def test_more_image_tokens_than_patches_is_the_configs_fault():
    """T5Gemma 2 pools its tower's patch grid to mm_tokens_per_image, as Gemma 3 does: more
    tokens per side than patches is a pooling kernel of 0 on which HF's own forward fails, a
    ConfigError naming the largest value that works (not a trace failure)."""
    from transformers import AutoModelForSeq2SeqLM

    from mobius.errors import ConfigError
    from mobius.tasks.seq2seq_images import image_inputs

    config = tiny_config_for("t5gemma2", encoder={"mm_tokens_per_image": 4})
    model = AutoModelForSeq2SeqLM.from_config(config)
    vision = config.encoder.vision_config
    patches = vision.image_size // vision.patch_size
    config.encoder.mm_tokens_per_image = (patches + 1) ** 2
    with pytest.raises(ConfigError, match=f"at most {patches * patches}"):
        image_inputs(from_hf(config), model)
