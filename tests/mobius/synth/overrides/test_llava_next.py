"""LLaVA-NeXT's override (mobius/synth/overrides/llava_next.py): the anyres tiling, unpadding and
newlines per feature give HF's per-image loop exactly, for images of different sizes and tile
counts, eagerly; the traced graphs are checked by benchmarks/vlm_coverage.py."""

from __future__ import annotations

import copy

import torch
from transformers.image_processing_utils import select_best_resolution

from mobius.synth.overrides.llava_next import best_resolution, tiles_per_feature
from mobius.testing.vlm import tiny_vlm

PINPOINTS = [[32, 64], [64, 32], [64, 64], [32, 96]]


def test_best_resolution_is_hfs_first_best():
    sizes = [[20, 50], [60, 40], [100, 30], [30, 31], [64, 64], [33, 95], [7, 300], [300, 7]]
    got = best_resolution(torch.tensor(sizes), PINPOINTS).to(torch.int64).tolist()
    assert got == [list(select_best_resolution(s, PINPOINTS)) for s in sizes]


def test_tiles_per_feature_equals_hf_per_image(tmp_path):
    model, _ = tiny_vlm("llava_next", tmp_path, image_grid_pinpoints=PINPOINTS)
    inner = model.model
    ours = copy.copy(inner)
    tiles_per_feature(ours)
    gen = torch.Generator().manual_seed(0)
    for sizes in ([[20, 50], [60, 40]], [[100, 30], [30, 31], [33, 95]]):
        sizes = torch.tensor(sizes)
        pixels = torch.randn(len(sizes), 5, 3, 32, 32, generator=gen)
        with torch.no_grad():
            per_image = inner.get_image_features(pixels, sizes, return_dict=True).pooler_output
            got = ours.get_image_features(pixels, sizes).pooler_output
        expected = torch.cat(list(per_image))
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, atol=0, rtol=0)
