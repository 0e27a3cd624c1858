"""Encoder benchmark (issue 13, item 7): a bert-base-shaped encoder, mobius against its peers.

A random-weight ``BertModel`` with bert-base's shape (12 layers, hidden 768, 12 heads,
intermediate 3072, vocab 30522, 512 positions; float32, ~420 MiB) is saved once in
``--workdir`` (default ``/tmp/mobius-bench``) and converted for feature extraction
(``last_hidden_state`` from ``input_ids``, ``attention_mask``, ``token_type_ids``; batch and
sequence dynamic) by:

- ``mobius``: ``python -m mobius build --model CKPT --output OUT -q``
- ``torch-dynamo``: ``torch.onnx.export(model, ..., dynamo=True)`` with dynamic batch/sequence
- ``transformers-exporters``: transformers' own ``OnnxExporter`` (``transformers.exporters``,
  default ``OnnxConfig(dynamic=True)``)

Each conversion runs in its own subprocess; wall time and peak RSS (the process tree, sampled
with psutil, or the kernel's ``ru_maxrss``, whichever is larger) as in ``convert.py``. Exporters
alternate inside each repeat (A B C, A B C, ...); medians are reported.

Then onnxruntime (CPU, ``intra_op_num_threads=--threads``, default optimisations) runs each
produced graph on batch 8 x 128 tokens (the last 16 tokens of every other row padded): the
sessions alternate inside each round, each round warms up and times ``--iters`` calls; the median
over all timed calls is reported, and each graph's output is compared with PyTorch's on the
non-padded positions. Results: ``benchmarks/results/encoder_speed.json``.

    python benchmarks/encoder_speed.py [--repeat 3] [--rounds 3] [--iters 10]
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convert  # noqa: E402

RESULTS = HERE / "results" / "encoder_speed.json"
EXPORTERS = ("mobius", "torch-dynamo", "transformers-exporters")
BATCH, TOKENS, PADDED = 8, 128, 16
BERT_BASE = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def make_checkpoint(workdir: Path) -> Path:
    """The random bert-base-shaped ``BertModel``, saved once (in a subprocess: keeps us small)."""
    directory = workdir / "ckpt" / "bert-base"
    if (directory / "config.json").is_file() and any(directory.glob("*.safetensors")):
        return directory
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import encoder_speed as e; e._create({str(directory)!r})"
    subprocess.run([sys.executable, "-c", code], check=True)
    return directory


def _create(directory: str) -> None:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    tmp = Path(directory + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model = BertModel(BertConfig(**BERT_BASE))
    model.save_pretrained(tmp)
    tmp.rename(directory)


def sample(batch: int = BATCH, tokens: int = TOKENS) -> dict[str, np.ndarray]:
    """Token ids, a right-padded mask (every other row ends in ``PADDED`` pad tokens), types."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1, BERT_BASE["vocab_size"], (batch, tokens), dtype=np.int64)
    mask = np.ones((batch, tokens), dtype=np.int64)
    mask[1::2, tokens - PADDED :] = 0
    ids[mask == 0] = 0
    types = np.zeros((batch, tokens), dtype=np.int64)
    types[:, tokens // 2 :] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _load(checkpoint: Path):
    import torch
    from transformers import BertModel

    return BertModel.from_pretrained(checkpoint, dtype=torch.float32).eval()


def export_torch_dynamo(checkpoint: Path, output: Path) -> None:
    import torch

    model = _load(checkpoint)
    feeds = {k: torch.from_numpy(v) for k, v in sample(2, 16).items()}
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
    shapes = {name: {0: batch, 1: seq} for name in INPUTS}
    output.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.onnx.export(
            model,
            (),
            kwargs=feeds,
            dynamo=True,
            dynamic_shapes=shapes,
            input_names=list(INPUTS),
            output_names=["last_hidden_state", "pooler_output"],
            external_data=True,
        )
    program.save(str(output / "model.onnx"), external_data=True)


def export_transformers(checkpoint: Path, output: Path) -> None:
    import torch
    from transformers.exporters.configs import OnnxConfig
    from transformers.exporters.exporter_onnx import OnnxExporter

    model = _load(checkpoint)
    feeds = {k: torch.from_numpy(v) for k, v in sample(2, 16).items()}
    with torch.no_grad():
        exported = OnnxExporter().export(model, feeds, config=OnnxConfig(dynamic=True))
    exported.save_pretrained(output)


def command(exporter: str, checkpoint: Path, output: Path) -> list[str]:
    if exporter == "mobius":
        return [sys.executable, "-m", "mobius", "build", "--model", str(checkpoint)] + [
            "--task",
            "feature-extraction",
            "--output",
            str(output),
            "--overwrite",
            "-q",
        ]
    fn = {"torch-dynamo": "export_torch_dynamo", "transformers-exporters": "export_transformers"}
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import encoder_speed as e; "
        f"e.{fn[exporter]}(e.Path({str(checkpoint)!r}), e.Path({str(output)!r}))"
    )
    return [sys.executable, "-c", code]


def onnx_file(output: Path) -> Path:
    models = sorted(output.rglob("*.onnx"), key=lambda p: p.stat().st_size)
    named = [p for p in models if p.name == "model.onnx"]
    return (named or models)[-1]


def session(path: Path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def hidden_output(sess) -> str:
    """The graph's ``last_hidden_state`` (by name, else its first output)."""
    names = [o.name for o in sess.get_outputs()]
    found = [n for n in names if "last_hidden_state" in n]
    return (found or names)[0]


def latency(paths: dict[str, Path], threads: int, rounds: int, iters: int) -> dict:
    import torch

    feeds = sample()
    with torch.no_grad():
        model = _load(paths.pop("__checkpoint__"))
        reference = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
        reference = reference.last_hidden_state.numpy()
    del model
    real = feeds["attention_mask"].astype(bool)
    times: dict[str, list[float]] = {name: [] for name in paths}
    diffs: dict[str, float] = {}
    for _ in range(rounds):
        for name, path in paths.items():
            sess = session(path, threads)
            wanted = {i.name for i in sess.get_inputs()}
            feed = {k: v for k, v in feeds.items() if k in wanted}
            out = hidden_output(sess)
            got = sess.run([out], feed)[0]  # warm-up
            diffs[name] = float(np.abs(got - reference)[real].max())
            for _ in range(iters):
                started = time.perf_counter()
                sess.run([out], feed)
                times[name].append((time.perf_counter() - started) * 1000)
            del sess
    return {
        name: {
            "median_ms": round(statistics.median(ms), 1),
            "min_ms": round(min(ms), 1),
            "max_ms": round(max(ms), 1),
            "n": len(ms),
            "max_abs_diff_vs_torch": diffs[name],
        }
        for name, ms in times.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-bench"))
    parser.add_argument("--exporters", nargs="+", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    checkpoint = make_checkpoint(args.workdir)
    result = {
        "benchmark": "encoder_speed",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": convert.machine(),
        "versions": convert.versions(),
        "config": BERT_BASE,
        "order": "exporters alternate inside each repeat (A B C, A B C, ...)",
        "exporters": {},
    }
    runs: dict[str, list[dict]] = {e: [] for e in args.exporters}
    failed: set[str] = set()
    for rep in range(args.repeat):
        for exporter in args.exporters:
            if exporter in failed:
                continue
            output = args.workdir / "out" / "bert-base" / exporter
            shutil.rmtree(output, ignore_errors=True)
            output.parent.mkdir(parents=True, exist_ok=True)
            run = convert.measure(command(exporter, checkpoint, output), args.timeout)
            if "error" not in run and not list(output.rglob("*.onnx")):
                run["error"] = "no .onnx file written"
            runs[exporter].append(run)
            status = "FAILED" if "error" in run else "ok"
            print(
                f"rep {rep + 1} {exporter:24s} {status:6s} {run['wall_s']:7.1f} s peak "
                f"{run['peak_rss_bytes'] / convert.MiB:6.0f} MiB load {run['load_1min_before']:.1f}",
                flush=True,
            )
            if "error" in run:
                failed.add(exporter)
                print("   ", run["error"].strip().splitlines()[-1][:300], flush=True)
    paths: dict = {"__checkpoint__": checkpoint}
    for exporter in args.exporters:
        output = args.workdir / "out" / "bert-base" / exporter
        summary = convert.summarize(runs[exporter])
        result["exporters"][exporter] = {"runs": runs[exporter], "summary": summary}
        if summary["ok"]:
            path = onnx_file(output)
            result["exporters"][exporter]["graph"] = convert.graph_stats(output)
            paths[exporter] = path
    timing = latency(paths, args.threads, args.rounds, args.iters)
    result["runtime"] = {
        "batch": BATCH,
        "tokens": TOKENS,
        "intra_op_num_threads": args.threads,
        "per_exporter": timing,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    for exporter, rec in result["exporters"].items():
        s = rec["summary"]
        if not s["ok"]:
            print(f"{exporter:24s} failed")
            continue
        t = timing[exporter]
        print(
            f"{exporter:24s} convert {s['wall_s_median']:6.1f} s  peak {s['peak_rss_mib_median']:5d} "
            f"MiB  nodes {rec['graph'].get('nodes')}  ort {t['median_ms']:7.1f} ms  "
            f"diff {t['max_abs_diff_vs_torch']:.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
