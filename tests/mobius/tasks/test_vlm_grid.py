"""Packed-patch towers (``target_sizes``: MiniCPM-V 4.6): the per-patch positions of the
``vision_utils`` shim and the per-token merges of ``overrides/minicpmv.py`` give transformers'
features for images of different sizes (the tower and projector alone, built in milliseconds)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch
from transformers.models.minicpmv4_6 import modeling_minicpmv4_6 as minicpm

from mobius.sources.config import from_hf
from mobius.synth.overrides import install_overrides
from mobius.tasks.vlm import vision_inputs
from mobius.tasks.vlm_grid import symbolic_grid
from mobius.testing.configs import tiny_config_for
from mobius.testing.vlm import VLM_OVERRIDES, pixel_inputs


class _Tower(torch.nn.Module):
    """``get_image_features``' path in the 16x mode: the tower, then the projector at half size."""

    def __init__(self, config) -> None:
        super().__init__()
        config.vision_config._attn_implementation = "eager"
        self.vision_tower = minicpm.MiniCPMV4_6VisionModel(config.vision_config)
        self.merger = minicpm.MiniCPMV4_6Merger(config)

    def forward(self, pixel_values, target_sizes):
        hidden = self.vision_tower(pixel_values, target_sizes=target_sizes).last_hidden_state
        return torch.cat(self.merger(hidden, target_sizes // 2))


def test_packed_images_per_token_match_transformers():
    config = tiny_config_for("minicpmv4_6", **VLM_OVERRIDES["minicpmv4_6"])
    specs = {s.name: s for s in vision_inputs(from_hf(config))}
    assert specs["pixel_values"].dims[:3] == (1, 3, config.vision_config.patch_size)
    assert specs["target_sizes"].dims == ("num_images", 2)
    torch.manual_seed(0)
    tower = _Tower(config).eval()
    inputs = pixel_inputs(SimpleNamespace(config=config), images=2)  # (4, 8), (8, 4) patches
    traced = copy.deepcopy(tower)
    install_overrides(traced)
    patches = inputs["pixel_values"].shape[-1] // config.vision_config.patch_size
    with torch.no_grad():
        expected = tower(**inputs)
        with symbolic_grid(traced, patches):
            got = traced(**inputs)
    assert got.shape == expected.shape == (4, config.text_config.hidden_size)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
