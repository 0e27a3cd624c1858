"""A single-graph trace bounded by a Python branch on the length is kept, with the bound checked
when the graph runs (``trace_bounds.guard_lengths``), and recorded as a ``length-bound`` fallback.

BigBird is the representative: it attends fully up to ``(5 + 2 x random blocks) x block`` tokens
and block-sparsely above.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from mobius.cli import main
from mobius.testing.parity import contract_diffs
from mobius.testing.tiny import make_checkpoint

BLOCK, RANDOM_BLOCKS = 8, 1
BOUND = (5 + 2 * RANDOM_BLOCKS) * BLOCK


def test_bigbird_converts_up_to_its_full_attention_length_and_refuses_longer(tmp_path):
    model, config = make_checkpoint(
        "big_bird",
        tmp_path / "ckpt",
        task="fill-mask",
        block_size=BLOCK,
        num_random_blocks=RANDOM_BLOCKS,
    )
    out = tmp_path / "onnx"
    assert main(["build", "--model", str(tmp_path / "ckpt"), "--output", str(out), "-q"]) == 0
    fallbacks = json.loads((out / "mobius.json").read_text())["fallbacks"]
    bound = [f for f in fallbacks if f["kind"] == "length-bound"]
    assert len(bound) == 1 and f"input_ids[1] <= {BOUND}" in bound[0]["reason"]
    assert bound[0]["costs"] == ["any length"]
    assert max(contract_diffs(model, out, config).values()) <= 1e-4

    session = ort.InferenceSession(str(out / "model.onnx"))
    names = [i.name for i in session.get_inputs()]
    session.run(None, {n: np.ones((1, BOUND), np.int64) for n in names})
    with pytest.raises(Exception, match="out of data bounds"):  # noqa: PT011 - onnxruntime's own
        session.run(None, {n: np.ones((1, BOUND + 1), np.int64) for n in names})
