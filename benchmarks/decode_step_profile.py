"""One decode step of several graph directories in one process, alternating: the wall time and
calling-thread CPU time of each step, the median per-step ratio of each graph to the first, and
(``--profile``) onnxruntime's profiler by op type (sum over nodes of each node's median kernel
time, and how many nodes ran).

Used for the int4 comparison with the genai builder (docs/design/, "Quantized decode on the
CPU EP"). Run it twice with the directories in both orders: a process's first session can run
slower.
Each directory needs ``model.onnx`` and ``genai_config.json`` (for the cache shape). With one
intra-op thread, the calling thread's CPU time is the whole step's work, the fair figure on a
loaded machine.

    python benchmarks/decode_step_profile.py DIR_A DIR_B [--steps 40] [--threads 1] [--profile]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

PAST = 128  # cached tokens before the step


def feeds_for(directory: Path, session) -> dict[str, np.ndarray]:
    decoder = json.loads((directory / "genai_config.json").read_text())["model"]["decoder"]
    kv_heads, head_size = decoder["num_key_value_heads"], decoder["head_size"]
    rng = np.random.default_rng(0)
    feeds = {}
    for i in session.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = np.array([[42]], np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((1, PAST + 1), np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.array([[PAST]], np.int64)
        else:
            dtype = np.float16 if "float16" in i.type else np.float32
            feeds[i.name] = rng.standard_normal((1, kv_heads, PAST, head_size)).astype(dtype)
    return feeds


def by_op(profile: str) -> dict:
    per, op = collections.defaultdict(list), {}
    for event in json.loads(Path(profile).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per[event["name"]].append(event["dur"])
            op[event["name"]] = event["args"].get("op_name")
    ms, count = collections.Counter(), collections.Counter()
    for name, durations in per.items():
        ms[op[name]] += statistics.median(durations) / 1000
        count[op[name]] += 1
    return {
        "kernel_sum_ms": round(sum(ms.values()), 2),
        "nodes": len(per),
        "by_op": {k: {"ms": round(v, 3), "nodes": count[k]} for k, v in ms.most_common()},
    }


def main() -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directories", nargs="+", type=Path)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    sessions, feeds = [], []
    for i, directory in enumerate(args.directories):
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
        if args.profile:
            options.enable_profiling, options.profile_file_prefix = True, f"{tmp}/p{i}"
        path = str(directory / "model.onnx")
        sessions.append(ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]))
        feeds.append(feeds_for(directory, sessions[-1]))
    for _ in range(3):  # warm-up
        for session, feed in zip(sessions, feeds, strict=True):
            session.run(["logits"], feed)
    wall = [[] for _ in sessions]
    cpu = [[] for _ in sessions]
    order = list(range(len(sessions)))
    for step in range(args.steps):
        for j in order if step % 2 == 0 else order[::-1]:
            t, c = time.perf_counter(), time.thread_time()
            sessions[j].run(["logits"], feeds[j])
            wall[j].append((time.perf_counter() - t) * 1000)
            cpu[j].append((time.thread_time() - c) * 1000)
    result = {}
    for j, directory in enumerate(args.directories):
        entry = {
            "wall_median_ms": round(statistics.median(wall[j]), 2),
            "cpu_median_ms": round(statistics.median(cpu[j]), 2),
        }
        if j:
            ratios = [
                (a / b, c / d) for a, b, c, d in zip(wall[j], wall[0], cpu[j], cpu[0], strict=True)
            ]
            entry["paired_wall_over_first"] = round(statistics.median(r[0] for r in ratios), 3)
            entry["paired_cpu_over_first"] = round(statistics.median(r[1] for r in ratios), 3)
        if args.profile:
            entry.update(by_op(sessions[j].end_profiling()))
        result[str(directory)] = entry
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
