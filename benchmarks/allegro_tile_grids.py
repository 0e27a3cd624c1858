"""AutoencoderKLAllegro's graphs at several tile grids (``mobius/diffusers/tiled_vae.py``): each
graph made for one grid, run at batch 2 against diffusers' tiled encoding and decoding (tiling
and slicing on: row by row). The sweep converts the default grid (two column tiles); this
checks one tile and two along every axis (the frame and row ramps too).

    PYTHONPATH=. python benchmarks/allegro_tile_grids.py

Results: ``benchmarks/results/allegro_tile_grids.json``.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import diffusers
import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import torch

from mobius.diffusers.components import diffusers_architecture, emit_graph, prepare_graph
from mobius.diffusers.tiled_vae import tiled_vae_tasks
from mobius.sources.resolve import resolve
from mobius.testing.diffusers_configs import randomize_scaled
from mobius.testing.diffusers_configs_allegro import ALLEGRO
from mobius.testing.diffusers_tiny import save_pretrained
from mobius.verification.diffusers_feeds import SIZE_SETS, feeds, torch_outputs

RESULTS = Path(__file__).resolve().parent / "results" / "allegro_tile_grids.json"
GRIDS = [(1, 1, 1), (1, 1, 2), (2, 2, 2)]  # tiles along frames, rows, columns


def main() -> None:
    root = Path(tempfile.mkdtemp())
    model = randomize_scaled(diffusers.AutoencoderKLAllegro(**ALLEGRO), 0).eval()
    save_pretrained(model, root / "model")
    source = resolve(str(root / "model"))
    arch = diffusers_architecture(source)
    results = {}
    for grid in GRIDS:
        for task in tiled_vae_tasks(type(model), grid):
            started = time.perf_counter()
            prepared = prepare_graph(source, arch, task, torch.float32)
            graph, _ = emit_graph(prepared, weights=True, src=str(root / "model"))
            seconds = round(time.perf_counter() - started, 1)
            path = root / f"{task.name}.onnx"
            ir.save(graph, path)
            session = ort.InferenceSession(str(path))
            inputs = feeds(task, arch, session, seed=1, run_sizes=SIZE_SETS[1] | {"batch": 2})
            with torch.no_grad():
                (expected,) = (t.numpy() for t in torch_outputs(task, model, inputs))
            (got,) = session.run(None, {k: v.numpy() for k, v in inputs.items()})
            key = f"{task.name} {'x'.join(map(str, grid))} tiles"
            results[key] = {
                "input": list(next(iter(inputs.values())).shape),
                "output": list(got.shape),
                "max_abs_diff": float(np.abs(got - expected).max()),
                "max_abs": float(np.abs(expected).max()),
                "convert_seconds": seconds,
            }
            print(key, results[key], flush=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
