"""HunYuan-VL's positions (mobius/runtime/image_index.py) equal its own get_rope_index on a padded
batch: two images of different grids in the first row, the second row text only."""

from __future__ import annotations

import functools
import types

import numpy as np
import pytest
import torch

from mobius.runtime.image_index import image_index_positions

IMAGE = 7


@pytest.mark.parametrize("sections", [[4, 2, 2], [2, 2, 2, 2]])  # 3 axes; 4, a sequence axis first
def test_positions_equal_hf_get_rope_index(sections):
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLModel

    from mobius.testing.configs import tiny_config_for

    config = tiny_config_for("hunyuan_vl")
    config.text_config.rope_parameters = {"rope_type": "default", "mrope_section": sections}
    config.vision_config.spatial_merge_size = 2
    grid = torch.tensor([[1, 4, 6], [1, 2, 2]])  # merged 2 x 3 and 1 x 1: 2 * 4 + 2, 1 * 2 + 2
    first = [3, 4, *[IMAGE] * 10, 5, *[IMAGE] * 4, 6, 8]
    ids = torch.tensor([first, [0] * 15 + [3, 4, 5, 6]])
    mask = (torch.arange(len(first))[None, :] >= torch.tensor([[0], [15]])).long()
    holder = types.SimpleNamespace(
        config=config,
        get_vision_position_ids=functools.partial(HunYuanVLModel.get_vision_position_ids, None),
    )
    expected, _ = HunYuanVLModel.get_rope_index(
        holder, ids, (ids == IMAGE).int(), image_grid_thw=grid, attention_mask=mask
    )
    got = image_index_positions(ids.numpy(), mask.numpy(), grid.numpy(), IMAGE, 2, len(sections))
    assert np.array_equal(got, expected.numpy())
    assert (got[-1, 0, 14:16] == 1).all()  # the second image's grid tokens: image index 1
