"""The embedding graph places the deepstack features at the image tokens as it places the image
features (``vlm_deepstack.placed_deepstack``): HF's ``masked_scatter`` order over the batch,
zeros elsewhere and at a text-only step. (Qwen3-VL's graphs are checked end to end, two images,
by benchmarks/vlm_coverage.py.)"""

from __future__ import annotations

import torch

from mobius.tasks.vlm_deepstack import placed_deepstack

TOKEN = 7


def test_rows_land_where_masked_scatter_puts_them():
    ids = torch.tensor([[1, TOKEN, TOKEN, 2, TOKEN], [TOKEN, 3, TOKEN, 4, 5]])
    features = torch.randn(2, 5, 4)  # two layers, five image tokens in all
    placed = placed_deepstack(ids == TOKEN, features)
    assert placed.shape == (2, 2, 5, 4)
    mask = (ids == TOKEN)[..., None].expand(2, 5, 4)
    for layer in range(2):
        expected = torch.zeros(2, 5, 4).masked_scatter(mask, features[layer])
        assert torch.equal(placed[layer], expected)


def test_a_text_only_step_gets_zeros():
    ids = torch.tensor([[TOKEN], [3]])  # a generated image token keeps no row: none are given
    placed = placed_deepstack(ids == TOKEN, torch.zeros(3, 0, 4))
    assert placed.shape == (3, 2, 1, 4) and not placed.any()
