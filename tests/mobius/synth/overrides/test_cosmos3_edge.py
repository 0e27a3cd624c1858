"""Cosmos 3 Edge's override (mobius/synth/overrides/cosmos3_edge.py) gives the position
embeddings HF's per-image antialiased resize gives, for images of several grids, smaller and
larger than the position table, eagerly in float32; the traced graphs are checked by
benchmarks/vlm_coverage.py."""

from __future__ import annotations

import torch

from mobius.synth.overrides.cosmos3_edge import positions_per_patch
from mobius.testing.configs import tiny_config_for
from mobius.testing.vlm import VLM_OVERRIDES


def test_embeddings_per_patch_equal_hf_per_image():
    from transformers.models.cosmos3_edge.modeling_cosmos3_edge import (
        Cosmos3EdgeVisionEmbeddings,
    )

    config = tiny_config_for("cosmos3_edge", **VLM_OVERRIDES["cosmos3_edge"]).vision_config
    config.num_patches = 16  # a 4 x 4 table: the images below shrink, keep and grow it
    grid = torch.tensor([[1, 2, 6], [1, 4, 4], [1, 8, 2], [1, 6, 10]])
    torch.manual_seed(0)
    embeddings = Cosmos3EdgeVisionEmbeddings(config).eval()
    with torch.no_grad():
        for parameter in embeddings.parameters():
            parameter.normal_(0.0, 0.3)
    pixels = torch.randn(int(grid.prod(-1).sum()), embeddings.patch_embedding.in_features)
    with torch.no_grad():
        expected = embeddings(pixels, grid)
        positions_per_patch(embeddings)
        got = embeddings(pixels, grid)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
