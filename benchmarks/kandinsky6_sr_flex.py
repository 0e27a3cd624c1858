"""Kandinsky 6 SR's NABLA attention: the dense-mask model mobius converts against PyTorch's
compiled flex attention (the block-sparse computation the model is designed for) and eager flex
attention (which ignores the ``BlockMask`` and attends fully).

Needs a C++ compiler for inductor (kept out of the test suite for that and its compile time).

    PYTHONPATH=. python benchmarks/kandinsky6_sr_flex.py

Results: ``benchmarks/results/kandinsky6_sr_flex.json``.
"""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path

import torch
from diffusers import Kandinsky6SRTransformer3DModel
from torch.nn.attention import flex_attention as flex

from mobius.diffusers.overrides.kandinsky6_sr import block_sparse_reference
from mobius.testing.diffusers_configs import randomize_scaled
from mobius.testing.diffusers_configs_k6sr import K6SR

RESULTS = Path(__file__).resolve().parent / "results" / "kandinsky6_sr_flex.json"
# (threshold, frames, height, width): 12 to 24 blocks of 8x8 tokens
CASES = [(0.8, 2, 16, 24), (0.5, 2, 16, 24), (0.8, 3, 16, 16), (0.5, 3, 32, 16),
         (0.8, 9, 8, 16), (0.5, 2, 24, 32)]  # fmt: skip


def compiled_flex():
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


def run_case(threshold: float, frames: int, height: int, width: int) -> dict:
    config = {**K6SR, "nabla_threshold": threshold}
    model = randomize_scaled(Kandinsky6SRTransformer3DModel(**config), 0).eval()
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, frames, height, width, 2 * config["in_visual_dim"] + 1, generator=gen)
    timestep = torch.tensor([250.0, 800.0])
    eager_flex = flex.flex_attention
    with torch.no_grad():
        eager = model(hidden, timestep).sample  # eager flex: full attention
        reference = block_sparse_reference(copy.deepcopy(model))(hidden, timestep).sample
        flex.flex_attention = compiled_flex()
        try:
            compiled = model(hidden, timestep).sample
        finally:
            flex.flex_attention = eager_flex
            torch._dynamo.reset()
    return {
        "threshold": threshold,
        "grid": [frames, height, width],
        "blocks": frames * (height // 8) * (width // 8),
        "dense_mask_vs_compiled": float((reference - compiled).abs().max()),
        "dense_mask_vs_eager": float((reference - eager).abs().max()),
    }


def main() -> None:
    rows = []
    for case in CASES:
        rows.append(run_case(*case))
        print(json.dumps(rows[-1]), flush=True)
    RESULTS.write_text(json.dumps({
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cases": rows,
    }, indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
