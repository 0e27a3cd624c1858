"""Kandinsky 6's SR transformer (``overrides/kandinsky6_sr.py``): the kept blocks are
``nabla_block_mask``'s, the dense-mask attention is what compiled flex attention computes (and not
eager flex's full attention), and the graph matches that block-sparse reference at two size sets
with batch, frames, height and width dynamic."""

from __future__ import annotations

import copy

import onnxruntime as ort
import pytest
import torch
from diffusers import Kandinsky6SRTransformer3DModel
from diffusers.models.transformers import transformer_kandinsky6_sr as k6sr
from torch.nn.attention import flex_attention as flex

from mobius.diffusers.components import component_tasks
from mobius.diffusers.config import architecture
from mobius.diffusers.overrides.kandinsky6_sr import (
    block_sparse_reference,
    kept_blocks,
    sliding_tile_mask,
)
from mobius.testing.diffusers_configs import randomize_scaled
from mobius.testing.diffusers_configs_k6sr import K6SR
from mobius.verification.diffusers_feeds import SIZE_SETS, feeds
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

NAME = "Kandinsky6SRTransformer3DModel"


@pytest.mark.parametrize(
    ("grid", "window", "threshold"),
    [((2, 2, 2), (3, 1, 1), 0.8), ((3, 2, 3), (1, 3, 1), 0.5), ((4, 1, 2), (3, 1, 1), 0.3)],
)
def test_kept_blocks_are_nabla_block_mask(grid, window, threshold):
    blocks = grid[0] * grid[1] * grid[2]
    gen = torch.Generator().manual_seed(blocks)
    query, key = (torch.randn(2, 2, blocks * 64, 8, generator=gen) for _ in range(2))
    sta = k6sr.sliding_tile_mask(*grid, window, "cpu")
    expected = k6sr.nabla_block_mask(query, key, sta, threshold).to_dense().bool()
    kept = kept_blocks(query, key, sta, threshold)
    assert torch.equal(kept, expected)
    assert (kept & ~sta).any() and not kept.all()  # the threshold keeps some blocks, drops some


@pytest.mark.parametrize(
    ("grid", "window"),
    [
        ((5, 3, 5), (3, 1, 1)),
        ((2, 4, 3), (3, 3, 1)),
        ((1, 2, 6), (1, 3, 5)),
        ((3, 1, 1), (5, 1, 1)),
    ],
)
def test_sliding_tile_mask_by_axes_is_diffusers(grid, window):
    expected = k6sr.sliding_tile_mask(*grid, window, "cpu")
    assert torch.equal(sliding_tile_mask(*grid, window, "cpu"), expected)


def _compiled_flex():
    """flex attention compiled. Inductor's CPU flex template fails to compile (C++ error:
    'kv_indices' was not declared) when ``kv_indices`` and ``full_kv_indices`` are one tensor, as
    ``nabla_block_mask`` passes them: the indices are copied first (the same values)."""
    compiled = torch.compile(flex.flex_attention, dynamic=False)

    def call(query, key, value, block_mask=None, **kwargs):
        mask = flex.BlockMask.from_kv_blocks(
            block_mask.kv_num_blocks,
            block_mask.kv_indices.clone(),
            block_mask.full_kv_num_blocks,
            block_mask.full_kv_indices,
            BLOCK_SIZE=block_mask.BLOCK_SIZE,
            mask_mod=None,
        )
        return compiled(query, key, value, block_mask=mask, **kwargs)

    return call


def test_dense_mask_is_compiled_flex_not_eager(monkeypatch):
    model = randomize_scaled(Kandinsky6SRTransformer3DModel(**K6SR), 0).eval()
    gen = torch.Generator().manual_seed(0)
    # 2 frames of 2x3 blocks: 12 blocks of 64 tokens
    hidden = torch.randn(2, 2, 16, 24, 2 * K6SR["in_visual_dim"] + 1, generator=gen)
    timestep = torch.tensor([250.0, 800.0])
    with torch.no_grad():
        eager = model(hidden, timestep).sample  # eager flex: full attention
        reference = block_sparse_reference(copy.deepcopy(model))(hidden, timestep).sample
        monkeypatch.setattr(flex, "flex_attention", _compiled_flex())
        try:
            compiled = model(hidden, timestep).sample
        finally:
            torch._dynamo.reset()
    assert (reference - compiled).abs().max() < 1e-5
    assert (reference - eager).abs().max() > 1e-3  # the dropped blocks matter at this input


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert(NAME, tmp_path_factory.mktemp("kandinsky6_sr"))


def test_transformer_matches_block_sparse_pytorch(converted):
    model, out = converted
    eager = copy.deepcopy(model)  # before max_diffs makes model the block-sparse reference
    session = ort.InferenceSession(str(out / "model.onnx"))
    hidden_states = session.get_inputs()[0]
    assert all(isinstance(d, str) for d in hidden_states.shape[:4])  # batch, frames, h, w
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs
    # the block sparsity shows at the first size set's input: eager flex differs there
    (task,) = component_tasks(NAME)
    inputs = feeds(task, architecture({"_class_name": NAME, **model.config}), session, seed=1,
                   run_sizes=SIZE_SETS[0])  # fmt: skip
    with torch.no_grad():
        sparse, full = (task.call(m, dict(inputs))[0] for m in (model, eager))
    assert (sparse - full).abs().max() > 1e-3
