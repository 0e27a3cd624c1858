"""Prefill and decode latency through onnxruntime-genai itself: mobius's graph against the genai
builder's, float32 and float16, on the Qwen2.5-0.5B shape (``python benchmarks/runtime.py --genai``).

The random-weight checkpoint is ``benchmarks/convert.py``'s ``qwen2-0.5b`` (made once in
``--workdir``). Four graphs: ``mobius build --ep cpu --dtype f32|f16`` and ``python -m
onnxruntime_genai.models.builder -e cpu -p fp32|fp16`` (each tuned for the CPU provider). Every
``genai_config.json`` gets the same session options (``intra_op_num_threads`` ``--threads``,
``inter_op_num_threads`` 1).

**Paired** (the machine this runs on is shared and loaded, so timings of separate runs are not
comparable): each round, for each dtype, one process loads both graphs and runs their generations
side by side, alternating ``generate_next_token()`` calls step by step (which graph goes first
alternates too): one warm-up generation, then ``--genai-iters`` generations of a
``--genai-prompt``-token prompt (batch 1, greedy). **prefill** is ``append_tokens(prompt)``,
**decode** each ``generate_next_token()`` after the first (one forward of one token on the growing
cache, plus genai's bookkeeping and greedy search). Reported: medians over every timed call, the
median of each round, mobius ÷ builder of the medians and the median of the per-step paired ratios
(below 1: mobius is faster). A graph genai cannot run is timed alone and its error recorded.

**onnxruntime alone** (``onnxruntime_step``): the two graphs of each dtype as plain onnxruntime
sessions in one process, one decode step on a 128-token cache, alternating, ``--genai-ort-steps``
steps, run twice (each graph's session created first once: a process's first session ran
10-15 % slower here, whichever graph it was): the paired ratios of wall time and of the calling
thread's CPU time (one intra-op thread: that is the whole step's work), and onnxruntime's profiler
(the sum over nodes of each node's median kernel time); their geometric mean over both orders.

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
    ("mobius", "f32"): ["--ep", "cpu", "--dtype", "f32"],
    ("builder", "f32"): ["-p", "fp32"],
    ("mobius", "f16"): ["--ep", "cpu", "--dtype", "f16"],
    ("builder", "f16"): ["-p", "fp16"],
}

RUN = """
import json, statistics, sys, time
import onnxruntime_genai as og
paths, prompt, new, iters = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
models, loads = [], []
for path in paths:
    t = time.perf_counter(); models.append(og.Model(path)); loads.append(time.perf_counter() - t)
vocab = json.load(open(paths[0] + "/genai_config.json"))["model"]["vocab_size"]
ids = [(7 * i + 11) % min(vocab - 10, 5000) + 10 for i in range(prompt)]
pres, decs, tokens = [[] for _ in paths], [[] for _ in paths], [[] for _ in paths]
for it in range(iters + 1):
    order = list(range(len(paths)))[:: 1 if it % 2 == 0 else -1]
    gens = {}
    for j in order:
        params = og.GeneratorParams(models[j])
        params.set_search_options(do_sample=False, max_length=prompt + new, min_length=prompt + new)
        gens[j] = og.Generator(models[j], params)
        t = time.perf_counter(); gens[j].append_tokens(ids); pre = (time.perf_counter() - t) * 1000
        if it:
            pres[j].append(pre)
    out = {j: [] for j in order}
    for j in order:
        gens[j].generate_next_token(); out[j].append(int(gens[j].get_next_tokens()[0]))
    while not gens[order[0]].is_done():
        for j in order:
            t = time.perf_counter(); gens[j].generate_next_token(); dec = (time.perf_counter() - t) * 1000
            if it:
                decs[j].append(dec)
            out[j].append(int(gens[j].get_next_tokens()[0]))
    tokens = [out[j] for j in range(len(paths))]
    del gens
print(json.dumps({"load_s": [round(x, 2) for x in loads], "prefill_ms": pres, "decode_ms": decs, "tokens": tokens}))
"""

ORT_STEP = """
import collections, json, statistics, sys, tempfile, time
import numpy as np, onnxruntime as ort
paths, steps, threads, past = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), 128
tmp = tempfile.mkdtemp()
sessions = []
for i, path in enumerate(paths):
    o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1
    o.enable_profiling = True; o.profile_file_prefix = f"{tmp}/p{i}"
    sessions.append(ort.InferenceSession(path + "/model.onnx", o, providers=["CPUExecutionProvider"]))
rng = np.random.default_rng(0)
feeds = []
for path, s in zip(paths, sessions):
    decoder = json.load(open(path + "/genai_config.json"))["model"]["decoder"]
    kv = (decoder["num_key_value_heads"], decoder["head_size"])
    f = {}
    for i in s.get_inputs():
        if i.name == "input_ids": f[i.name] = np.array([[42]], np.int64)
        elif i.name == "attention_mask": f[i.name] = np.ones((1, past + 1), np.int64)
        elif i.name == "position_ids": f[i.name] = np.array([[past]], np.int64)
        else:
            dt = np.float16 if "float16" in i.type else np.float32
            f[i.name] = rng.standard_normal((1, kv[0], past, kv[1])).astype(dt)
    feeds.append(f)
for _ in range(3):
    for s, f in zip(sessions, feeds): s.run(["logits"], f)
times, cpu = [[] for _ in paths], [[] for _ in paths]
for k in range(steps):
    for j in (range(len(paths)) if k % 2 == 0 else reversed(range(len(paths)))):
        t, c = time.perf_counter(), time.thread_time()
        sessions[j].run(["logits"], feeds[j])
        times[j].append((time.perf_counter() - t) * 1000); cpu[j].append((time.thread_time() - c) * 1000)
kernel = []
for s in sessions:
    per, op = collections.defaultdict(list), {}
    for e in json.load(open(s.end_profiling())):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e["name"]].append(e["dur"]); op[e["name"]] = e["args"].get("op_name")
    by_op = collections.Counter()
    for name, durs in per.items(): by_op[op[name]] += statistics.median(durs) / 1000
    kernel.append({"sum_of_node_medians_ms": round(sum(by_op.values()), 2), "nodes": len(per),
                   "by_op_ms": {k: round(v, 3) for k, v in by_op.most_common()}})
print(json.dumps({"step_ms": times, "cpu_ms": cpu, "kernel": kernel}))
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


def _run(script: str, *argv: str) -> tuple[dict | None, str]:
    proc = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True)
    if proc.returncode:
        return None, proc.stderr.strip()[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), ""


def _paired(ms_a: list[float], ms_b: list[float]) -> float:
    return round(statistics.median(a / b for a, b in zip(ms_a, ms_b, strict=True)), 3)


def main(args) -> int:
    sys.path.insert(0, str(HERE))
    import convert

    checkpoint = convert.make_checkpoint(args.genai_model, args.workdir)
    out = args.workdir / "out" / args.genai_model / "genai-ep-cpu"
    dtypes = [d for d in ("f32", "f16") if d in args.genai_dtypes]
    graphs = {(e, d): build(checkpoint, out, e, d) for e, d in GRAPHS if d in dtypes}
    for directory in graphs.values():
        set_threads(directory, args.threads)
    samples = {key: {"prefill": [], "decode": [], "rounds": []} for key in graphs}
    paired = {d: [] for d in dtypes}
    common = [str(args.genai_prompt), str(args.genai_new_tokens), str(args.genai_iters)]
    for rnd in range(args.rounds):
        for dtype in dtypes:
            keys = [("mobius", dtype), ("builder", dtype)][:: 1 if rnd % 2 == 0 else -1]
            load = os.getloadavg()[0]
            run, error = _run(RUN, ",".join(str(graphs[k]) for k in keys), *common)
            if run is None:  # one of the two fails (the builder's fp16 graph): each alone
                runs = {}
                for key in keys:
                    alone, error = _run(RUN, str(graphs[key]), *common)
                    if alone is None:
                        samples[key]["error"] = error
                        print(key, "FAILED", error[-300:], flush=True)
                    else:
                        runs[key] = {k: v[0] for k, v in alone.items()}
            else:
                runs = {key: {k: v[i] for k, v in run.items()} for i, key in enumerate(keys)}
                a, b = (runs[("mobius", dtype)]["decode_ms"], runs[("builder", dtype)]["decode_ms"])
                paired[dtype].append(_paired(a, b))
            for key, rec in runs.items():
                samples[key]["prefill"] += rec["prefill_ms"]
                samples[key]["decode"] += rec["decode_ms"]
                samples[key]["tokens"] = rec["tokens"]
                samples[key]["rounds"].append(
                    {
                        "load_1min": round(load, 2),
                        "load_s": rec["load_s"],
                        "prefill_median_ms": round(statistics.median(rec["prefill_ms"]), 3),
                        "decode_median_ms": round(statistics.median(rec["decode_ms"]), 3),
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
            ratios[dtype]["decode_paired_per_round"] = paired[dtype]
            ratios[dtype]["same_tokens"] = a["tokens"] == b["tokens"]
    ort_step = {}
    for dtype in dtypes if args.genai_ort_steps else []:
        # a process's first session ran 10-15 % slower than its second here, whichever graph it
        # was: both orders, and the geometric mean of their paired ratios
        orders, per_order = (("mobius", "builder"), ("builder", "mobius")), {}
        for order in orders:
            paths = ",".join(str(graphs[e, dtype]) for e in order)
            run, error = _run(ORT_STEP, paths, str(args.genai_ort_steps), "1")
            if run is None:
                per_order = {"error": error}
                break
            i, j = order.index("mobius"), order.index("builder")
            per_order["-".join(order)] = {
                "mobius": {**stats(run["step_ms"][i]), "kernel": run["kernel"][i]},
                "builder": {**stats(run["step_ms"][j]), "kernel": run["kernel"][j]},
                "paired_wall": _paired(run["step_ms"][i], run["step_ms"][j]),
                "paired_thread_cpu": _paired(run["cpu_ms"][i], run["cpu_ms"][j]),
                "kernel_sum_of_node_medians": round(
                    run["kernel"][i]["sum_of_node_medians_ms"]
                    / run["kernel"][j]["sum_of_node_medians_ms"],
                    3,
                ),
            }
        if "error" not in per_order:
            runs = list(per_order.values())
            per_order["mobius_over_builder_both_orders"] = {
                key: round((runs[0][key] * runs[1][key]) ** 0.5, 3)
                for key in ("paired_wall", "paired_thread_cpu", "kernel_sum_of_node_medians")
            }
            print(dtype, "onnxruntime step:", per_order["mobius_over_builder_both_orders"])
        ort_step[dtype] = per_order
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
            "onnxruntime_steps": args.genai_ort_steps,
        },
        "graphs": entries,
        "mobius_over_builder": ratios,
        "onnxruntime_step": ort_step,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(ratios), f"\nwrote {RESULTS}")
    return 0
