"""MiniCPM-V 4.7's canvas positions (``runtime_canvas``) equal HF's ``get_rope_index`` on its own
config, for thumbnails: one image or two in a row, left padding, both downsample modes. (The
sweep checks the converted model end to end.)"""

from __future__ import annotations

import functools
import types

import numpy as np
import pytest
import torch

from mobius.runtime.canvas import canvas_positions
from mobius.tasks.vlm_canvas import canvas_recipe, position_manifest
from mobius.testing.configs import tiny_config_for

IMAGE, OPEN, CLOSE, SLICE = 250, 244, 245, 246
MARKERS = {"image_start_id": OPEN, "image_end_id": CLOSE, "slice_start_id": SLICE}


def _hf_positions(config, ids, mask, sizes):
    """HF's get_rope_index, on an object holding only the config and the recipe's methods."""
    from transformers.models.minicpmv4_7 import modeling_minicpmv4_7 as family

    cls = next(c for c in vars(family).values() if hasattr(c, "get_rope_index"))
    model = types.SimpleNamespace(config=config)
    for name in ("get_rope_index", "_group_visual_frames", "get_vision_position_ids"):
        setattr(model, name, functools.partial(getattr(cls, name), model))
    model._frame_end_idx = cls._frame_end_idx
    types_ = (ids == IMAGE).int()
    out, _ = model.get_rope_index(ids, types_, target_sizes=sizes, attention_mask=mask)
    return out.numpy()


def _image(rows, columns, merge):
    return [OPEN] + [IMAGE] * (rows * columns // merge**2) + [CLOSE]


@pytest.mark.parametrize("mode", ["16x", "4x"])
def test_canvas_positions_match_get_rope_index(mode):
    config = tiny_config_for("minicpmv4_7", image_token_id=IMAGE, downsample_mode=mode, **MARKERS)
    assert canvas_recipe(config)
    spec = position_manifest(config)["canvas"]
    merge = spec["merge_factor"]
    a, b = (4 * merge, 2 * merge), (merge, 3 * merge)  # patches per side
    first = [5, 6, *_image(*a, merge), 7, *_image(*b, merge), 8, 9]  # two images, text between
    second = [10, *_image(*b, merge), *_image(*a, merge), 11]  # two adjacent images
    width = max(len(first), len(second)) + 2
    ids = torch.zeros(2, width, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for row, tokens in enumerate((first, second)):  # left-padded
        ids[row, width - len(tokens) :] = torch.tensor(tokens)
        mask[row, width - len(tokens) :] = 1
    sizes = torch.tensor([a, b, b, a])
    expected = _hf_positions(config, ids, mask, sizes)
    ours = canvas_positions(ids.numpy(), mask.numpy(), sizes.numpy(), spec)
    np.testing.assert_array_equal(ours, expected)
