"""Latent grids a pipeline passes as Python ints (``mobius/diffusers/latent_grid.py``): the graph
takes the latents in their grid layout and computes the ints, and what the pipeline builds from
them, from the input's size. QwenImage packs its latents in the graph and derives ``img_shapes``;
HunyuanDiT derives its rotary table (checked equal to its pipeline's; the sweep converts it).
QwenImage converted with the CLI and matching PyTorch at atol 1e-4 at two size sets (other grids
and prompt lengths than the traced ones)."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def _graph(out) -> dict:
    return next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))


def test_packed_latents_match_pytorch(tmp_path):
    """QwenImage: unpacked latents in and out, the prompt's mask an input, no img_shapes."""
    model, out = convert("QwenImageTransformer2DModel", tmp_path)
    graph = _graph(out)
    assert graph["inputs"] == [
        "hidden_states", "encoder_hidden_states", "encoder_hidden_states_mask", "timestep",
    ]  # fmt: skip
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs


def test_pack_is_the_pipelines():
    """``pack`` and ``unpack`` lay tokens out as QwenImagePipeline's ``_pack_latents`` and
    ``_unpack_latents`` do."""
    from diffusers import QwenImagePipeline

    from mobius.diffusers.latent_grid import pack, unpack

    latents = torch.randn(2, 4, 6, 10)
    packed = QwenImagePipeline._pack_latents(latents, 2, 4, 6, 10)
    assert torch.equal(pack(latents, 2), packed)
    unpacked = QwenImagePipeline._unpack_latents(packed, 6 * 8, 10 * 8, 8)[:, :, 0]
    assert torch.equal(unpack(packed, 2, 6, 10), unpacked)


@pytest.mark.parametrize("rows,cols", [(4, 4), (8, 4), (4, 8), (12, 20), (16, 24), (25, 15)])
def test_hunyuan_rotary_is_the_pipelines(rows, cols):
    """The derived rotary table equals HunyuanDiTPipeline's for square, tall and wide grids."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed
    from diffusers.pipelines.hunyuandit.pipeline_hunyuandit import get_resize_crop_region_for_grid

    from mobius.diffusers.grid_rotary import hunyuan_dit_rotary

    crops = get_resize_crop_region_for_grid((rows, cols), 512 // 8 // 2)
    expected = get_2d_rotary_pos_embed(8, crops, (rows, cols), output_type="pt")
    latents = torch.zeros(1, 4, 2 * rows, 2 * cols)
    got = hunyuan_dit_rotary({"patch_size": 2, "attention_head_dim": 8}, {"hidden_states": latents})
    for e, g in zip(expected, got, strict=True):
        assert e.shape == g.shape
        assert (e - g).abs().max() < 1e-5  # linspace's vectorised rounding: an ulp apart


def test_expert_choice_override_is_the_models():
    """NucleusMoE's routing by integer capacity and batched matmul equals its own forward at
    token counts whose capacity rounds up."""
    import diffusers

    from mobius.diffusers.overrides.qwenimage import expert_choice_by_batched_matmul
    from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled

    kwargs = next(c for c in ALL_CONFIGS if c[0] == "NucleusMoEImageTransformer2DModel")[2]
    model = randomize_scaled(diffusers.NucleusMoEImageTransformer2DModel(**kwargs), 0).eval()
    layer = model.transformer_blocks[2].img_mlp  # capacity factor 1.5
    original = copy.deepcopy(layer)
    expert_choice_by_batched_matmul(layer)
    for tokens in (7, 13):
        x, unmodulated, t = (
            torch.randn(2, tokens, 32),
            torch.randn(2, tokens, 32),
            torch.randn(2, 32),
        )
        with torch.no_grad():
            assert torch.allclose(layer(x, unmodulated, t), original(x, unmodulated, t), atol=1e-6)


def test_lumina_next_rotary_is_the_pipelines():
    """Lumina-Next's derived table equals LuminaPipeline's (a 384 x 384 table, linearly scaled
    below the watershed timestep, NTK-scaled from it) cut to the grid, to the last bit."""
    import math

    from diffusers.models.embeddings import get_2d_rotary_pos_embed_lumina

    from mobius.diffusers.grid_rotary import lumina_next_rotary

    cfg = {"patch_size": 2, "hidden_size": 32, "num_attention_heads": 2, "sample_size": 8}
    for height, width, t in [(8, 8, 0.5), (16, 8, 0.3), (32, 48, 0.9), (24, 40, 1.0)]:
        scaling = math.sqrt(width * 8 * height * 8 / 64**2)
        linear, ntk = (scaling, 1.0) if t < 1.0 else (1.0, scaling)
        table = get_2d_rotary_pos_embed_lumina(16, 384, 384, linear_factor=linear, ntk_factor=ntk)
        x = {"hidden_states": torch.zeros(1, 4, height, width), "timestep": torch.tensor([t])}
        assert torch.equal(lumina_next_rotary(cfg, x), table[: height // 2, : width // 2])


def test_qwenimage21_layout_override_is_the_models():
    """QwenImage 2.1's layout built from the sizes equals its forward on the derived img_mask
    (segment-by-segment attention, rotary positions from the mask's values), with a padded
    prompt row, at two grids and prompt lengths."""
    import diffusers

    from mobius.diffusers.components import component_tasks
    from mobius.diffusers.overrides import install
    from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled

    kwargs = next(c for c in ALL_CONFIGS if c[0] == "QwenImage21Transformer2DModel")[2]
    model = randomize_scaled(diffusers.QwenImage21Transformer2DModel(**kwargs), 0).eval()
    overridden = copy.deepcopy(model)
    install(overridden)
    (task,) = component_tasks("QwenImage21Transformer2DModel")
    for height, width, text in [(16, 8, 6), (8, 12, 5)]:
        mask = torch.ones(3, text, dtype=torch.bool)
        mask[0, -1] = False
        x = {
            "hidden_states": torch.randn(3, 4, height, width),
            "timestep": torch.rand(3),
            "encoder_hidden_states": torch.randn(3, text, 12),
            "encoder_hidden_states_mask": mask,
        }
        with torch.no_grad():
            (expected,), (got,) = task.call(model, dict(x)), task.call(overridden, dict(x))
        assert got.shape == (3, 4, height, width)
        assert (expected - got).abs().max() < 1e-6
