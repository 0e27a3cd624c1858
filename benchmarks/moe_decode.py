"""Decode latency of a Mixtral-shaped MoE under the three ways mobius can emit its experts.

- ``fused``: ``patterns/moe.py`` claims router + experts as one ``com.microsoft`` ``MoE``;
- ``selected``: the pattern switched off, the captured experts call emitted as the compact
  decomposition (``SelectedExperts``: gathers the chosen experts, batched MatMul);
- ``op_by_op``: the experts traced through transformers' ``batched_mm`` and lowered op by op, as
  mobius did before the pattern.

The model is Mixtral's block structure at a reduced width so it fits a laptop in float32: hidden
1024, expert intermediate 3584 (Mixtral's 14336/4096 ratio), 8 experts, top-2, 32/8 heads
(Mixtral's ratio, head_dim 32), ``--layers`` layers, vocab 32000; random weights (std 0.02).
Batch 1, a ``--prefill``-token prompt, then one new token on that cache, timed ``--iters`` times
per round; variants alternate inside each round, each first in turn, and each round loads the
sessions afresh.
``intra_op_num_threads=2``. Parity: each variant's prefill and decode logits against HF eager.

    PYTHONPATH=. python benchmarks/moe_decode.py [--workdir /tmp/moe_bench] [--rounds 3]

Results: ``benchmarks/results/moe_decode.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from runtime import Driver, stats, timed  # noqa: E402

RESULTS = HERE / "results" / "moe_decode.json"
VARIANTS = ("fused", "selected", "op_by_op")
SHAPE = {
    "hidden_size": 1024,
    "intermediate_size": 3584,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}


def make_checkpoint(directory: Path, layers: int) -> dict:
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(num_hidden_layers=layers, **SHAPE)
    if not (directory / "config.json").exists():
        torch.manual_seed(0)
        model = MixtralForCausalLM(config)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02)
        model.save_pretrained(directory)
    return config.to_dict()


@contextlib.contextmanager
def variant(name: str):
    """Switch mobius to one way of emitting the experts for the duration of a build."""
    import patterns
    from mobius.synth import meta_model
    from patterns import moe

    saved = (meta_model.EXPERTS_IMPLEMENTATION, list(patterns.ANCHOR_PATTERNS))
    if name == "op_by_op":
        meta_model.EXPERTS_IMPLEMENTATION = "batched_mm"
    if name in ("selected", "op_by_op"):
        patterns.ANCHOR_PATTERNS[:] = [p for p in patterns.ANCHOR_PATTERNS if p is not moe.match]
    try:
        yield
    finally:
        meta_model.EXPERTS_IMPLEMENTATION = saved[0]
        patterns.ANCHOR_PATTERNS[:] = saved[1]


def build(checkpoint: Path, out: Path, name: str) -> dict:
    import onnx

    import mobius

    if not (out / "model.onnx").exists():
        with variant(name):
            started = time.perf_counter()
            mobius.build(str(checkpoint)).save(out)
            seconds = time.perf_counter() - started
        (out / "build_seconds").write_text(f"{seconds:.1f}")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return {
        "build_s": float((out / "build_seconds").read_text()),
        "nodes": len(model.graph.node),
        "moe_nodes": ops.get("MoE", 0),
        "gather_nodes": ops.get("Gather", 0),
    }


def reference(checkpoint: Path, ids: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)).logits.numpy()
    del model
    gc.collect()
    return logits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/moe_bench"))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prefill", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    checkpoint = args.workdir / "checkpoint"
    config = make_checkpoint(checkpoint, args.layers)
    ids = np.random.default_rng(0).integers(0, SHAPE["vocab_size"], (1, args.prefill + 1))
    expected = reference(checkpoint, ids)
    builds = {v: build(checkpoint, args.workdir / v, v) for v in VARIANTS}
    decode: dict[str, list[float]] = {v: [] for v in VARIANTS}
    prefill: dict[str, list[float]] = {v: [] for v in VARIANTS}
    parity: dict[str, dict] = {}
    rounds = []
    for round_index in range(args.rounds):
        medians = {}
        order = VARIANTS[round_index % 3 :] + VARIANTS[: round_index % 3]  # each goes first once
        for name in order:
            drv = Driver(args.workdir / name / "model.onnx", config, args.threads)
            first = drv.feeds(ids[:, : args.prefill], None, 0)
            timed(drv, first, 1)  # warm-up
            prefill[name] += timed(drv, first, 3)
            out = drv.run(first)
            past = {n: out[n] for n in drv.cache_out.values()}
            step = drv.feeds(ids[:, args.prefill :], past, args.prefill)
            if round_index == 0:
                last = drv.run(step)["logits"]
                parity[name] = {
                    "prefill_max_abs": float(
                        np.abs(out["logits"] - expected[:, : args.prefill]).max()
                    ),
                    "decode_max_abs": float(np.abs(last - expected[:, args.prefill :]).max()),
                }
            timed(drv, step, 2)  # warm-up
            ms = timed(drv, step, args.iters)
            decode[name] += ms
            medians[name] = round(statistics.median(ms), 3)
            del drv
            gc.collect()
        rounds.append({"decode_median_ms": medians, "load": os.getloadavg()[0]})
        print(f"round {round_index}: {medians} load {os.getloadavg()[0]:.1f}", flush=True)
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "shape": {**SHAPE, "num_hidden_layers": args.layers},
        "prefill_tokens": args.prefill,
        "threads": args.threads,
        "builds": builds,
        "parity": parity,
        "decode": {v: stats(decode[v]) for v in VARIANTS},
        "prefill": {v: stats(prefill[v]) for v in VARIANTS},
        "rounds": rounds,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("builds", "parity", "decode")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
