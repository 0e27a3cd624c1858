"""The Pixtral towers' override (mobius/synth/overrides/pixtral.py) computes what HF's per-image
loops compute, on a padded batch of two images of different sizes, eagerly in float32; the
traced graphs are checked by tests/mobius/tasks/test_vlm_images.py and benchmarks/vlm_coverage.py."""

from __future__ import annotations

import copy

import pytest
import torch

from mobius.synth.overrides.pixtral import padded_batch
from mobius.testing.vlm import pixel_inputs, tiny_vlm


@pytest.mark.parametrize("model_type", ["mistral3", "lighton_ocr"])
def test_padded_batch_equals_hf_per_image(model_type, tmp_path):
    model, _ = tiny_vlm(model_type, tmp_path)
    pixels = pixel_inputs(model, images=2)  # 48 x 64 and 64 x 48 pixels, padded to 64 x 64
    assert pixels["pixel_values"].shape[0] == 2
    assert pixels["image_sizes"][0].tolist() != pixels["image_sizes"][1].tolist()
    inner = model.model
    with torch.no_grad():
        per_image = inner.get_image_features(**pixels, return_dict=True).pooler_output
        ours = copy.copy(inner)
        padded_batch(ours)
        got = ours.get_image_features(**pixels).pooler_output
    expected = torch.cat(list(per_image))
    assert got.shape == expected.shape and len(per_image) == 2
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
