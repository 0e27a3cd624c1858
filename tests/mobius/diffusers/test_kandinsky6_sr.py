"""Kandinsky 6's SR transformer (``overrides/kandinsky6_sr.py``): the kept blocks are
``nabla_block_mask``'s, and the graph matches the block-sparse reference (SDPA under their dense
mask, not eager flex's full attention) at two size sets with batch, frames, height and width
dynamic. That reference equals compiled flex attention: ``benchmarks/kandinsky6_sr_flex.py``."""

from __future__ import annotations

import copy

import onnxruntime as ort
import pytest
import torch
from diffusers.models.transformers import transformer_kandinsky6_sr as k6sr

from mobius.diffusers.components import component_tasks
from mobius.diffusers.config import architecture
from mobius.diffusers.overrides.kandinsky6_sr import (
    kept_blocks,
    sliding_tile_mask,
)
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
