"""AnyFlow's rotary table (``overrides/anyflow.py``): converted with a dynamic grid, and equal to
PyTorch at grids with more frames than patch rows and columns, which the trace of diffusers'
``min(frames, rows, cols)`` held no graph for."""

from __future__ import annotations

from mobius.testing.diffusers_configs import ALL_CONFIGS
from mobius.verification.diffusers_feeds import RUN_SIZES
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

LABEL = "AnyFlowTransformer3DModel"


def test_more_frames_than_patch_rows_match_pytorch(tmp_path):
    patch = dict(next(c for c in ALL_CONFIGS if c[0] == LABEL)[2])["patch_size"]
    rows, cols = RUN_SIZES["height"] // patch[1], RUN_SIZES["width"] // patch[2]
    assert RUN_SIZES["num_frames"] > max(rows, cols)  # the first size set breaks the relation
    model, out = convert(LABEL, tmp_path)
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs
