"""Prefill and decode latency through onnxruntime-genai itself: mobius's graph against the genai
builder's, float32 and float16, on the Qwen2.5-0.5B shape (``python benchmarks/runtime.py --genai``).

The random-weight checkpoint is ``benchmarks/convert.py``'s ``qwen2-0.5b`` (made once in
``--workdir``). Four graphs: ``mobius build --dtype f32|f16`` and ``python -m
onnxruntime_genai.models.builder -p fp32|fp16 -e cpu``. Every ``genai_config.json`` gets the same
session options (``intra_op_num_threads`` ``--threads``, ``inter_op_num_threads`` 1).

A round runs each graph in its own subprocess, graphs alternating (A B C D, A B C D, ...): load
``og.Model``, one warm-up generation, then ``--iters`` generations of a ``--prompt``-token prompt
(batch 1, greedy): **prefill** is ``append_tokens(prompt)`` (one forward over the prompt),
**decode** each ``generate_next_token()`` after the first (one forward of one token on the growing
cache, plus genai's own bookkeeping and greedy search). Reported: medians over every timed call
of every round, the median of each round, and mobius ÷ builder per dtype (below 1: mobius is
faster). The tokens of the two f32 graphs are compared too.

Results: ``benchmarks/results/runtime_genai.json``.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "runtime_genai.json"
GRAPHS = {
    ("mobius", "f32"): ["--dtype", "f32"],
    ("builder", "f32"): ["-p", "fp32"],
    ("mobius", "f16"): ["--dtype", "f16"],
    ("builder", "f16"): ["-p", "fp16"],
}

RUN = """
import json, statistics, sys, time
import onnxruntime_genai as og
path, prompt, new, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = time.perf_counter(); model = og.Model(path); load = time.perf_counter() - t
vocab = json.load(open(path + "/genai_config.json"))["model"]["vocab_size"]
ids = [(7 * i + 11) % min(vocab - 10, 5000) + 10 for i in range(prompt)]
def once():
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=prompt + new, min_length=prompt + new)
    g = og.Generator(model, params)
    t = time.perf_counter(); g.append_tokens(ids); pre = (time.perf_counter() - t) * 1000
    g.generate_next_token(); tokens = [int(g.get_next_tokens()[0])]; dec = []
    while not g.is_done():
        t = time.perf_counter(); g.generate_next_token(); dec.append((time.perf_counter() - t) * 1000)
        tokens.append(int(g.get_next_tokens()[0]))
    return pre, dec, tokens
once()
pres, decs = [], []
for _ in range(iters):
    pre, dec, tokens = once(); pres.append(pre); decs += dec
print(json.dumps({"load_s": round(load, 2), "prefill_ms": pres, "decode_ms": decs, "tokens": tokens}))
"""


def build(checkpoint: Path, out: Path, exporter: str, dtype: str) -> Path:
    """The graph of ``exporter`` in ``dtype`` (converted once), with ``genai_config.json``."""
    target = out / f"{exporter}-{dtype}"
    if (target / "genai_config.json").is_file():
        return target
    flags = GRAPHS[exporter, dtype]
    if exporter == "mobius":
        cmd = [sys.executable, "-m", "mobius", "build", "--model", str(checkpoint)]
        cmd += ["--output", str(target), "--overwrite", "-q", *flags]
    else:
        cache = out / f"{exporter}-{dtype}.cache"
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint)]
        cmd += ["-o", str(target), "-e", "cpu", "-c", str(cache), *flags]
    print("converting:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    shutil.rmtree(out / f"{exporter}-{dtype}.cache", ignore_errors=True)
    return target


def set_threads(directory: Path, threads: int) -> None:
    path = directory / "genai_config.json"
    config = json.loads(path.read_text())
    options = config["model"]["decoder"].setdefault("session_options", {})
    options.update(intra_op_num_threads=threads, inter_op_num_threads=1)
    path.write_text(json.dumps(config, indent=2))


def stats(ms: list[float]) -> dict:
    q = statistics.quantiles(ms, n=4) if len(ms) >= 2 else [ms[0]] * 3
    return {
        "median_ms": round(statistics.median(ms), 3),
        "min_ms": round(min(ms), 3),
        "iqr_ms": round(q[2] - q[0], 3),
        "n": len(ms),
    }


def main(args) -> int:
    sys.path.insert(0, str(HERE))
    import convert

    checkpoint = convert.make_checkpoint(args.genai_model, args.workdir)
    out = args.workdir / "out" / args.genai_model / "genai"
    dtypes = [d for d in ("f32", "f16") if d in args.genai_dtypes]
    graphs = {(e, d): build(checkpoint, out, e, d) for e, d in GRAPHS if d in dtypes}
    for directory in graphs.values():
        set_threads(directory, args.threads)
    samples = {key: {"prefill": [], "decode": [], "rounds": []} for key in graphs}
    for rnd in range(args.rounds):
        for key, directory in graphs.items():
            load = os.getloadavg()[0]
            cmd = [sys.executable, "-c", RUN, str(directory), str(args.genai_prompt)]
            cmd += [str(args.genai_new_tokens), str(args.genai_iters)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                samples[key]["error"] = proc.stderr.strip()[-2000:]
                print(key, "FAILED", samples[key]["error"][-300:], flush=True)
                continue
            run = json.loads(proc.stdout.strip().splitlines()[-1])
            samples[key]["prefill"] += run["prefill_ms"]
            samples[key]["decode"] += run["decode_ms"]
            samples[key]["tokens"] = run["tokens"]
            samples[key]["rounds"].append(
                {
                    "load_1min": round(load, 2),
                    "load_s": run["load_s"],
                    "prefill_median_ms": round(statistics.median(run["prefill_ms"]), 3),
                    "decode_median_ms": round(statistics.median(run["decode_ms"]), 3),
                }
            )
            print(f"round {rnd + 1} {key}: {samples[key]['rounds'][-1]}", flush=True)
    entries = {}
    for (exporter, dtype), rec in samples.items():
        entry = {"rounds": rec["rounds"], **({"error": rec["error"]} if "error" in rec else {})}
        if rec["prefill"]:
            entry.update(prefill=stats(rec["prefill"]), decode=stats(rec["decode"]))
            entry["tokens"] = rec["tokens"]
        entries[f"{exporter}-{dtype}"] = entry
    ratios = {}
    for dtype in dtypes:
        a, b = entries.get(f"mobius-{dtype}", {}), entries.get(f"builder-{dtype}", {})
        if "decode" in a and "decode" in b:
            ratios[dtype] = {
                phase: round(a[phase]["median_ms"] / b[phase]["median_ms"], 3)
                for phase in ("prefill", "decode")
            }
            ratios[dtype]["same_tokens"] = a["tokens"] == b["tokens"]
    result = {
        "benchmark": "runtime_genai",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": convert.machine(),
        "versions": convert.versions(),
        "settings": {
            "model": args.genai_model,
            "threads": args.threads,
            "prompt_tokens": args.genai_prompt,
            "new_tokens": args.genai_new_tokens,
            "generations_per_round": args.genai_iters,
            "rounds": args.rounds,
        },
        "graphs": entries,
        "mobius_over_builder": ratios,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(ratios), f"\nwrote {RESULTS}")
    return 0
