"""The grid towers' overrides (mobius/synth/overrides: PaddleOCR-VL, LFM3-VL, Kimi-K2.5,
MuseGlimmer) compute what HF's per-image loops compute, for several images of different grids
(eager, float32; the traced graphs are checked by benchmarks/vlm_coverage.py)."""

from __future__ import annotations

import torch

# three images: frames x rows x columns of patches, each side a multiple of the merge size 2
GRID = torch.tensor([[1, 4, 6], [1, 2, 2], [2, 6, 4]])
PATCHES = int(GRID.prod(-1).sum())


def test_paddleocr_projector_merges_every_image_as_hf_does():
    from transformers.models.paddleocr_vl.modeling_paddleocr_vl import PaddleOCRProjector

    from mobius.synth.overrides.paddleocr_vl import merged_by_gather
    from mobius.testing.configs import tiny_config_for

    torch.manual_seed(0)
    projector = PaddleOCRProjector(tiny_config_for("paddleocr_vl")).eval()
    features = torch.randn(PATCHES, projector.pre_norm.normalized_shape[0])
    with torch.no_grad():
        expected = projector(features, GRID)
        merged_by_gather(projector)
        got = projector(features, GRID)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_lfm3_convolution_per_patch_equals_hf_per_frame_conv2d():
    from transformers import AutoModel

    from mobius.synth.overrides.lfm3_vl import conv_by_neighbours
    from mobius.testing.configs import tiny_config_for

    torch.manual_seed(0)
    config = tiny_config_for("lfm3_vl").vision_config
    tower = AutoModel.from_config(config).eval()
    pixels = torch.randn(PATCHES, tower.patch_embed.in_features)
    grid = GRID.clone()
    grid[:, 0] = 1  # one frame per item, as images have
    pixels = pixels[: int(grid.prod(-1).sum())]
    with torch.no_grad():
        expected = tower(pixels, grid).last_hidden_state
        conv_by_neighbours(tower)
        got = tower(pixels, grid).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_kimi_merge_index_equals_hf_for_images():
    from transformers.models.kimi_k25 import modeling_kimi_k25 as kimi

    from mobius.synth.overrides.kimi_k25 import _merge_index

    grid = GRID.clone()
    grid[:, 0] = 1  # images: one frame each (a video's frames pool into one token: not covered)
    index, weight, merged = kimi.get_vision_temporal_merge_index(grid, 2, 2)
    got_index, got_weight, got_merged = _merge_index(grid, int(grid.prod(-1).sum()), 2, 2)
    assert torch.equal(got_index, index) and torch.equal(got_weight, weight)
    assert got_merged == merged


def test_kimi_position_embeddings_equal_hf():
    from transformers.models.kimi_k25 import modeling_kimi_k25 as kimi

    from mobius.synth.overrides.kimi_k25 import frame_index_per_patch
    from mobius.testing.configs import tiny_config_for

    torch.manual_seed(0)
    embeddings = kimi.Kimi_K25VisionPositionEmbeddings(tiny_config_for("kimi_k25").vision_config)
    torch.nn.init.normal_(embeddings.position_embeddings)
    grid = GRID.clone()
    grid[:, 0] = 1
    hidden = torch.randn(int(grid.prod(-1).sum()), embeddings.dim)
    with torch.no_grad():
        expected = embeddings(hidden, grid)
        frame_index_per_patch(embeddings)
        got = embeddings(hidden, grid)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_muse_glimmer_shuffle_index_equals_hf():
    from transformers.models.muse_glimmer.modeling_muse_glimmer import (
        get_vision_pixel_shuffle_index,
    )

    from mobius.synth.overrides.grid_blocks import block_patches

    expected = get_vision_pixel_shuffle_index(GRID, 2)
    assert torch.equal(block_patches(GRID, PATCHES, 2, 2).reshape(-1), expected)
