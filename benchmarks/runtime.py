"""Runtime benchmark: onnxruntime CPU latency of every model ``benchmarks/convert.py`` produced.

For each model and exporter (``WORKDIR/out/<model>/<exporter>``), with ``intra_op_num_threads=2``
(``inter_op_num_threads=1``, default graph optimisations, CPU execution provider):

- **prefill**: batch 1, 128 tokens, empty cache;
- **decode**: batch 1, one new token on a 128-token cache (the ``present`` outputs of the prefill),
  through each model's own cache I/O: the names are read from the session (``past_key_values.{i}.key``
  for mobius, the torch wrapper and onnxruntime-genai; ``past_key_values.layers.{i}.keys`` /
  ``cache.layers.{i}.keys`` for transformers' exporter), ``position_ids`` only where the graph has it.

Exporters alternate inside each round (A B C D, A B C D, ...); a round loads the session afresh
(the load time is recorded too), warms up, then times ``--prefill-iters`` prefills and
``--decode-iters`` decode steps. Reported: median and spread (min, max, IQR) over all timed calls,
and the median of each round. The machine's load average is recorded with each round.

Parity: the HF model in eager PyTorch (float32) runs the same 129 tokens once; the prefill logits
(positions 0..127) and the decode logits (position 128) are compared with each model's, max abs diff.

Results: ``benchmarks/results/runtime.json``.

    python benchmarks/runtime.py [--models tiny qwen2-0.5b llama-3.2-1b] [--rounds 3]

``--genai``: prefill and decode through onnxruntime-genai itself, mobius's ``--ep cpu`` graph
against the genai builder's ``-e cpu``, f32 and f16, on the Qwen2.5-0.5B shape, both graphs of a
dtype in one process, step by step (``benchmarks/runtime_genai.py``; results in
``benchmarks/results/runtime_genai.json``):

    nice python benchmarks/runtime.py --genai [--genai-dtypes f32 f16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convert  # noqa: E402

RESULTS = HERE / "results" / "runtime.json"
PREFILL = 128


def _layer_kind(name: str) -> tuple[int, str] | None:
    m = re.search(r"(\d+)", name)
    if m is None:
        return None
    low = name[m.end() :].lower()  # after the layer index: "past_key_values" says nothing
    kind = "key" if "key" in low else "value" if "value" in low else None
    return (int(m.group(1)), kind) if kind else None


class Driver:
    """Feeds one ONNX causal LM through its own input and output names."""

    def __init__(self, path: Path, config: dict, threads: int = 2):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        started = time.perf_counter()
        self.sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.load_s = time.perf_counter() - started
        self.inputs = {i.name: i for i in self.sess.get_inputs()}
        self.outputs = [o.name for o in self.sess.get_outputs()]
        self.cache_in = {
            n: _layer_kind(n)
            for n in self.inputs
            if n not in ("input_ids", "attention_mask", "position_ids")
        }
        by_kind = {_layer_kind(n): n for n in self.outputs if n != "logits"}
        self.cache_out = {n: by_kind[k] for n, k in self.cache_in.items()}
        self.kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
        self.head_dim = (
            config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        )

    def _int(self, name: str, array: np.ndarray) -> np.ndarray:
        return array.astype(np.int32 if "int32" in self.inputs[name].type else np.int64)

    def feeds(self, ids: np.ndarray, past: dict[str, np.ndarray] | None, past_len: int) -> dict:
        batch, seq = ids.shape
        out = {
            "input_ids": self._int("input_ids", ids),
            "attention_mask": self._int(
                "attention_mask", np.ones((batch, past_len + seq), np.int64)
            ),
        }
        if "position_ids" in self.inputs:
            pos = np.arange(past_len, past_len + seq, dtype=np.int64)[None].repeat(batch, 0)
            out["position_ids"] = self._int("position_ids", pos)
        for name in self.cache_in:
            if past is None:
                dtype = np.float16 if "float16" in self.inputs[name].type else np.float32
                out[name] = np.zeros((batch, self.kv_heads, 0, self.head_dim), dtype)
            else:
                out[name] = past[self.cache_out[name]]
        return out

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        return dict(zip(self.outputs, self.sess.run(None, feeds), strict=True))


def op_profile(path: Path, config: dict, ids: np.ndarray, threads: int, steps: int) -> dict:
    """Per-op-type time of one decode step (onnxruntime's profiler, mean over ``steps`` steps)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    drv = Driver(path, config, threads)
    first = drv.run(drv.feeds(ids[:, :PREFILL], None, 0))
    past = {k: v for k, v in first.items() if k != "logits"}
    feeds = drv.feeds(ids[:, PREFILL:], past, PREFILL)
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path("/tmp") / f"ort-profile-{os.getpid()}")
    sess = __import__("onnxruntime").InferenceSession(
        str(path), opts, providers=["CPUExecutionProvider"]
    )
    for _ in range(3):
        sess.run(None, feeds)
    Path(sess.end_profiling()).unlink(missing_ok=True)  # the warm-up's trace
    sess = __import__("onnxruntime").InferenceSession(
        str(path), opts, providers=["CPUExecutionProvider"]
    )
    for _ in range(steps):
        sess.run(None, feeds)
    trace = Path(sess.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    by_op: dict[str, float] = {}
    for ev in events:
        if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time"):
            op = ev.get("args", {}).get("op_name", "?")
            by_op[op] = by_op.get(op, 0.0) + ev["dur"] / 1000 / steps
    total = sum(by_op.values())
    return {
        "ms_per_step_by_op": {
            k: round(v, 3) for k, v in sorted(by_op.items(), key=lambda x: -x[1])
        },
        "ms_per_step_kernels": round(total, 3),
        "steps": steps,
    }


def timed(drv: Driver, feeds: dict, iters: int) -> list[float]:
    out = []
    for _ in range(iters):
        t = time.perf_counter()
        drv.sess.run(None, feeds)
        out.append((time.perf_counter() - t) * 1000)
    return out


def stats(ms: list[float]) -> dict:
    q = statistics.quantiles(ms, n=4) if len(ms) >= 2 else [ms[0]] * 3
    return {
        "median_ms": round(statistics.median(ms), 3),
        "min_ms": round(min(ms), 3),
        "max_ms": round(max(ms), 3),
        "iqr_ms": round(q[2] - q[0], 3),
        "n": len(ms),
    }


def reference_logits(checkpoint: Path, ids: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
    del model
    gc.collect()
    return logits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-bench"))
    parser.add_argument("--models", nargs="+", default=list(convert.MODELS))
    parser.add_argument("--exporters", nargs="+", default=list(convert.EXPORTERS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prefill-iters", type=int, default=5)
    parser.add_argument("--decode-iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--op-profile",
        action="store_true",
        help="only profile one decode step per op type (onnxruntime profiler); adds op_profile to the results",
    )
    genai = parser.add_argument_group("--genai: through onnxruntime-genai (runtime_genai.py)")
    genai.add_argument("--genai", action="store_true", help="mobius vs builder through genai")
    genai.add_argument("--genai-model", default="qwen2-0.5b", choices=["tiny", "qwen2-0.5b"])
    genai.add_argument("--genai-dtypes", nargs="+", default=["f32", "f16"], choices=["f32", "f16"])
    genai.add_argument("--genai-prompt", type=int, default=128, help="prompt tokens")
    genai.add_argument("--genai-new-tokens", type=int, default=33, help="tokens per generation")
    genai.add_argument("--genai-iters", type=int, default=2, help="timed generations per round")
    genai.add_argument(
        "--genai-ort-steps", type=int, default=40, help="plain onnxruntime decode steps (0: skip)"
    )
    args = parser.parse_args(argv)
    if args.genai:
        import runtime_genai

        return runtime_genai.main(args)
    if args.op_profile:
        data = json.loads(args.results.read_text()) if args.results.is_file() else {"models": {}}
        for name in args.models:
            checkpoint = args.workdir / "ckpt" / name
            config = json.loads((checkpoint / "config.json").read_text())
            ids = np.random.default_rng(0).integers(0, config["vocab_size"], (1, PREFILL + 1))
            for exporter in args.exporters:
                path = args.workdir / "out" / name / exporter / "model.onnx"
                if not path.is_file():
                    continue
                prof = op_profile(path, config, ids, args.threads, args.decode_iters)
                rec = data["models"].setdefault(name, {"exporters": {}})["exporters"]
                rec.setdefault(exporter, {})["op_profile"] = prof
                top = list(prof["ms_per_step_by_op"].items())[:6]
                print(f"{name} {exporter}: {prof['ms_per_step_kernels']:.2f} ms/step; {top}")
                gc.collect()
        args.results.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return 0

    result = {
        "benchmark": "runtime",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": convert.machine(),
        "versions": convert.versions(),
        "settings": {
            "intra_op_num_threads": args.threads,
            "inter_op_num_threads": 1,
            "prefill_tokens": PREFILL,
            "decode_cache_tokens": PREFILL,
            "batch": 1,
            "rounds": args.rounds,
            "prefill_iters_per_round": args.prefill_iters,
            "decode_iters_per_round": args.decode_iters,
        },
        "models": {},
    }
    if args.results.is_file():
        old = json.loads(args.results.read_text())
        result["models"] = {k: v for k, v in old.get("models", {}).items() if k not in args.models}

    for name in args.models:
        checkpoint = args.workdir / "ckpt" / name
        config = json.loads((checkpoint / "config.json").read_text())
        rng = np.random.default_rng(0)
        ids = rng.integers(0, config["vocab_size"], (1, PREFILL + 1), dtype=np.int64)
        ref = reference_logits(checkpoint, ids)
        entry: dict = {"exporters": {}}
        result["models"][name] = entry
        present = []
        for exporter in args.exporters:
            out = args.workdir / "out" / name / exporter
            models = sorted(out.rglob("*.onnx")) if out.is_dir() else []
            if not models:
                entry["exporters"][exporter] = {"error": "no model (conversion failed)"}
                continue
            path = next((p for p in models if p.name == "model.onnx"), models[-1])
            entry["exporters"][exporter] = {"path": str(path), "rounds": []}
            present.append((exporter, path))

        samples = {e: {"prefill": [], "decode": []} for e, _ in present}
        for rnd in range(args.rounds):
            for exporter, path in present:
                rec = entry["exporters"][exporter]
                if "error" in rec:
                    continue
                load = os.getloadavg()[0]
                try:
                    drv = Driver(path, config, args.threads)
                    pre_feeds = drv.feeds(ids[:, :PREFILL], None, 0)
                    first = drv.run(pre_feeds)
                    past = {k: v for k, v in first.items() if k != "logits"}
                    dec_feeds = drv.feeds(ids[:, PREFILL:], past, PREFILL)
                    second = drv.run(dec_feeds)
                    if rnd == 0:
                        rec["load_s"] = round(drv.load_s, 2)
                        rec["inputs"] = list(drv.inputs)[:5] + ["..."]
                        rec["parity"] = {
                            "prefill_max_abs_diff": float(
                                np.abs(first["logits"] - ref[:, :PREFILL]).max()
                            ),
                            "decode_max_abs_diff": float(
                                np.abs(second["logits"][:, -1] - ref[:, PREFILL]).max()
                            ),
                            "reference_max_abs_logit": float(np.abs(ref).max()),
                        }
                    drv.run(pre_feeds)  # warm-up
                    pre = timed(drv, pre_feeds, args.prefill_iters)
                    for _ in range(3):
                        drv.run(dec_feeds)
                    dec = timed(drv, dec_feeds, args.decode_iters)
                except Exception as exc:  # recorded, not dropped
                    rec["error"] = f"{type(exc).__name__}: {str(exc)[:2000]}"
                    print(f"{name} {exporter}: FAILED {rec['error'][:300]}", flush=True)
                    continue
                finally:
                    drv = None
                    gc.collect()
                samples[exporter]["prefill"] += pre
                samples[exporter]["decode"] += dec
                rec["rounds"].append(
                    {
                        "load_1min": round(load, 2),
                        "load_1min_after": round(os.getloadavg()[0], 2),
                        "prefill_median_ms": round(statistics.median(pre), 3),
                        "decode_median_ms": round(statistics.median(dec), 3),
                    }
                )
                print(
                    f"{name:13s} round {rnd + 1} {exporter:24s} prefill {statistics.median(pre):8.1f} ms "
                    f"decode {statistics.median(dec):7.2f} ms load {load:.1f}",
                    flush=True,
                )
                args.results.parent.mkdir(parents=True, exist_ok=True)
                args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        for exporter, _ in present:
            rec = entry["exporters"][exporter]
            if samples[exporter]["prefill"]:
                rec["prefill"] = stats(samples[exporter]["prefill"])
                rec["decode"] = stats(samples[exporter]["decode"])
        for exporter, rec in entry["exporters"].items():
            if "parity" in rec:
                p = rec["parity"]
                print(
                    f"{name:13s} {exporter:24s} parity prefill {p['prefill_max_abs_diff']:.2e} "
                    f"decode {p['decode_max_abs_diff']:.2e}",
                    flush=True,
                )

    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
