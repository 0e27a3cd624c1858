"""Several images of different sizes in one prompt, end to end: a tiny Mistral 3 (the Pixtral
towers' class: the processor's padded batch and ``image_sizes``) with two images, 48 x 64 and
64 x 48 pixels, in the first row of a batch of two; features, prefill, a cached step and 12
greedy tokens against PyTorch. (benchmarks/vlm_coverage.py sweeps every family so.)"""

from __future__ import annotations

import json

import pytest

import mobius
from mobius.testing.vlm import tiny_vlm, vlm_parity

ATOL = 1e-4


@pytest.fixture(scope="module")
def two_image_mistral3(tmp_path_factory):
    work = tmp_path_factory.mktemp("mistral3")
    model, _ = tiny_vlm("mistral3", work / "hf", seed=5)
    out = mobius.build(work / "hf").save(work / "onnx")
    return model, out


def test_any_number_of_images_is_one_graph(two_image_mistral3):
    _, out = two_image_mistral3
    manifest = json.loads((out / "mobius.json").read_text())
    assert manifest["graphs"]["vision_encoder.onnx"]["inputs"] == ["pixel_values", "image_sizes"]
    assert "vision_images_per_call" not in manifest


@pytest.mark.parametrize("images", [1, 2, 3])
def test_images_of_different_sizes_match_pytorch(two_image_mistral3, images):
    model, out = two_image_mistral3
    result = vlm_parity(model, out, images=images)
    assert result["images"] == images
    assert result["features_diff"] < ATOL
    assert result["prefill_diff"] < ATOL
    assert result["decode_diff"] < ATOL
    assert result["generate_logits_diff"] < ATOL
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])
