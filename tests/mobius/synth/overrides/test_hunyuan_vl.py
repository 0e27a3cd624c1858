"""The HunYuan-VL and HY-V4-VL towers' overrides (mobius/synth/overrides/hunyuan_vl.py) compute
what HF's per-image loops compute (the position table resized per image, the merger per image with
its newline, begin and end features), for images of several grids, some smaller and some larger
than the position table, eagerly in float32; the traced graphs are checked by
benchmarks/vlm_coverage.py."""

from __future__ import annotations

import importlib

import pytest
import torch

from mobius.synth.overrides import hunyuan_vl
from mobius.testing.configs import tiny_config_for
from mobius.testing.vlm import VLM_OVERRIDES

# images (one frame each): rows x columns of patches, multiples of the merge size 2, around the
# position table's side of 4
GRID = torch.tensor([[1, 4, 6], [1, 2, 2], [1, 6, 4], [1, 2, 8]])
# model type: (tower class, position override, merger override, features around each image)
TOWERS = {
    "hunyuan_vl": (
        "HunYuanVLVisionTransformer",
        hunyuan_vl.positions_per_patch,
        hunyuan_vl.merged_per_token,
        2,
    ),
    "hy_v4_vl": (
        "HYV4VLVisionModel",
        hunyuan_vl.shifted_positions_per_patch,
        hunyuan_vl.newline_rows_per_token,
        0,
    ),
}


@pytest.mark.parametrize("model_type", sorted(TOWERS))
def test_tower_per_patch_equals_hf_per_image(model_type):
    name, positions, merger, around = TOWERS[model_type]
    family = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    config = tiny_config_for(model_type, **VLM_OVERRIDES.get(model_type, {})).vision_config
    config.max_image_size = 4 * config.patch_size  # a 4 x 4 table: images shrink and grow it
    torch.manual_seed(0)
    tower = getattr(family, name)(config).eval()
    with torch.no_grad():
        for parameter in tower.parameters():  # every one random (HF leaves some empty)
            parameter.normal_(0.0, 0.3)
    width = config.num_channels * config.patch_size**2
    pixels = torch.randn(int(GRID.prod(-1).sum()), width)
    with torch.no_grad():
        expected = tower(pixels, GRID).pooler_output
        positions(tower.embeddings)
        merger(tower)
        got = tower(pixels, GRID).pooler_output
    merged = GRID[:, 1:] // config.spatial_merge_size
    per_image = merged[:, 0] * (merged[:, 1] + 1) + around
    assert got.shape == expected.shape and got.shape[-2] == int(per_image.sum())
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_converted_hunyuan_vl_matches_pytorch_with_two_images(tmp_path):
    """End to end (the traced per-patch graph, the image-index positions): two images of 4 x 6
    and 4 x 4 patches in the first row of a padded batch of two; features, prefill, a cached step
    and 12 greedy tokens against PyTorch."""
    import mobius
    from mobius.testing.vlm import tiny_vlm, vlm_parity

    model, _ = tiny_vlm("hunyuan_vl", tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    result = vlm_parity(model, out, images=2)
    assert result["images"] == 2 and result["image_tokens"] == 2 * 4 + 2 + 2 * 3 + 2
    for key in ("features_diff", "prefill_diff", "decode_diff", "generate_logits_diff"):
        assert result[key] < 1e-4, (key, result[key])
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])
