"""Wan Animate 2's transformer by ``kv_cache_mode`` (``mobius/diffusers/reference_cache.py``):
``transformer_extract/`` gives the sample and each layer's reference key and value
(``kv_cache.{layer}.key``, ``kv_cache.{layer}.value``), ``transformer_cached/`` takes them under
the same names. Run as its pipeline runs them (one reference pass, then denoising steps on the
cache it filled), the graphs match PyTorch's forward called with lists, the cache object and the
pipeline's Python ints, at atol 1e-4."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from mobius.diffusers.reference_cache import cache_names, uncompiled_block_masks
from tests.mobius.diffusers.parity import ATOL, convert

LABEL = "WanAnimate2Transformer3DModel"
LAYERS = 2
FRAMES, HEIGHT, WIDTH = 3, 8, 12  # the reference's latents (the generation: one frame more)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert(LABEL, tmp_path_factory.mktemp("wana2"))


def _pipeline_run(model, reference, generations):
    """PyTorch's outputs as the pipeline calls the model: one extract pass, then each cached
    step on the cache it filled (lists of one sample, the grids and ints its steps compute)."""
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    cache = WanAnimate2KVCache(LAYERS)
    grid = [FRAMES, HEIGHT // 2, WIDTH // 2]
    common = {"encoder_hidden_states_image": reference["encoder_hidden_states_image"]}
    with torch.no_grad(), uncompiled_block_masks():
        extracted = model(
            [reference["hidden_states"][0]], timestep=reference["timestep"],
            encoder_hidden_states=[reference["encoder_hidden_states"][0]],
            condition_latents=[reference["condition_latents"][0]], kv_cache=cache,
            kv_cache_mode="extract", seq_len=FRAMES * grid[1] * grid[2],
            offset_grid_sizes=torch.tensor([grid]), **common,
        ).sample[0][None]  # fmt: skip
        outputs = [extracted, *(t for i in range(LAYERS) for t in cache.get(i).get())]
        for step in generations:
            outputs.append(model(
                [step["hidden_states"][0]], timestep=step["timestep"],
                encoder_hidden_states=[step["encoder_hidden_states"][0]],
                condition_latents=[step["condition_latents"][0]], kv_cache=cache,
                kv_cache_mode="cached", seq_len=(FRAMES + 1) * grid[1] * grid[2],
                reference_grid_sizes=torch.tensor([grid]), origin_len=4 * (FRAMES - 1) + 1,
                origin_area=[8 * HEIGHT, 8 * WIDTH], **common,
            ).sample[0][None])  # fmt: skip
    return outputs


def _inputs(gen, frames, timestep):
    return {
        "hidden_states": torch.randn(1, 4, frames, HEIGHT, WIDTH, generator=gen),
        "timestep": torch.tensor([timestep]),
        "encoder_hidden_states": torch.randn(1, 5, 12, generator=gen),
        "condition_latents": torch.randn(1, 8, frames, HEIGHT, WIDTH, generator=gen),
    }


def test_graph_names(converted):
    _, out = converted
    extract = json.loads((out / "transformer_extract" / "mobius.json").read_text())["graphs"]
    cached = json.loads((out / "transformer_cached" / "mobius.json").read_text())["graphs"]
    latents = ["hidden_states", "timestep", "encoder_hidden_states", "condition_latents",
               "encoder_hidden_states_image"]  # fmt: skip
    assert extract["model.onnx"]["outputs"] == ["out_sample", *cache_names(LAYERS)]
    assert cached["model.onnx"] == {"inputs": latents + cache_names(LAYERS),
                                    "outputs": ["out_sample"]}  # fmt: skip
    assert not (out / "transformer_cached_uncondition").exists()  # 2 layers: block 9 is none


def test_pipeline_sequence_matches_pytorch(converted):
    model, out = converted
    gen = torch.Generator().manual_seed(3)
    image = torch.randn(1, 4, 1280, generator=gen)
    reference = _inputs(gen, FRAMES, 980.0) | {"encoder_hidden_states_image": image}
    steps = [_inputs(gen, FRAMES + 1, t) | {"encoder_hidden_states_image": image}
             for t in (980.0, 517.5)]  # fmt: skip
    expected = _pipeline_run(model, reference, steps)

    extract = ort.InferenceSession(str(out / "transformer_extract" / "model.onnx"))
    cached = ort.InferenceSession(str(out / "transformer_cached" / "model.onnx"))
    got = extract.run(None, {k: v.numpy() for k, v in reference.items()})
    cache = dict(zip(cache_names(LAYERS), got[1:], strict=True))  # the graph's own cache
    for step in steps:
        got += cached.run(None, {k: v.numpy() for k, v in step.items()} | cache)
    assert len(got) == len(expected) == 1 + 2 * LAYERS + len(steps)
    for e, g in zip(expected, got, strict=True):
        assert e.shape == g.shape
        assert float(np.abs(e.numpy() - g).max()) < ATOL
    # the reference reaches the generation: another cache changes the step's output
    other = {k: np.ascontiguousarray(v[:, ::-1]) for k, v in cache.items()}
    moved = cached.run(None, {k: v.numpy() for k, v in steps[0].items()} | other)[0]
    assert float(np.abs(moved - got[1 + 2 * LAYERS]).max()) > 10 * ATOL


def test_the_unconditional_graph_exists_past_nine_layers():
    """The unconditional branch skips block 9: a graph of its own only where there is one."""
    from mobius.diffusers.components import component_tasks
    from mobius.diffusers.config import architecture

    for layers, graphs in ((9, 2), (10, 3)):
        arch = architecture({"_class_name": LABEL, "num_layers": layers})
        names = [t.name for t in component_tasks(LABEL) if t.supports(arch)]
        assert names == ["transformer_extract", "transformer_cached",
                         "transformer_cached_uncondition"][:graphs]  # fmt: skip
