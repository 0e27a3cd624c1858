"""Conversion benchmark: mobius against the exporters people use today, side by side.

Random-weight checkpoints are built locally once (cached in ``--workdir``, default
``/tmp/mobius-bench``): a tiny Llama (the bundled ``examples/tiny-llama``), a Qwen2.5-0.5B-shaped
qwen2 and a Llama-3.2-1B-shaped llama (llama3 rope scaling), all float32 with a locally trained
byte-level BPE tokenizer (onnxruntime-genai's builder reads one).

Each checkpoint is converted by every exporter, exporters alternating inside each repeat
(A B C D, A B C D, ...), each conversion in its own subprocess whose resident set (with children)
is sampled with psutil:

- ``mobius``: ``python -m mobius build --model CKPT --output OUT -q``
- ``torch.onnx.export(dynamo=True)``: the HF model wrapped so the KV cache is flat tensors in/out
- ``transformers.exporters``: transformers' own ``OnnxExporter`` (default ``OnnxConfig(dynamic=True)``),
  one graph with the cache as inputs/outputs
- ``onnxruntime-genai builder``: ``python -m onnxruntime_genai.models.builder -i CKPT -o OUT -p fp32 -e cpu``

Recorded per run: wall time, peak RSS, the machine's 1-minute load average before and after; per
output: size on disk, node count and op histogram (sub-graphs and functions counted too).
A failing exporter is recorded with the tail of its error. Results: ``benchmarks/results/convert.json``.
The produced models stay in ``WORKDIR/out/<model>/<exporter>`` for ``benchmarks/runtime.py``.

    python benchmarks/convert.py [--models tiny qwen2-0.5b llama-3.2-1b] [--repeat 3]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import checkpoints  # noqa: E402  (sibling module: the benchmark checkpoints)
import convert_phases  # noqa: E402
import convert_tables  # noqa: E402  (sibling modules; scripts run with this folder on sys.path)
import peers  # noqa: E402  (sibling module; scripts run with this folder on sys.path)
import psutil
from checkpoints import MODELS  # noqa: E402
from measure import measure, tree_rss  # noqa: E402,F401  (convert.measure is what the other benchmarks call)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "convert.json"
MiB = 1024 * 1024

BIG = ("llama-3.1-8b",)  # only with --big: a 16 GB checkpoint
# checkpoint dtype -> (mobius --dtype, builder -p): bf16 checkpoints convert to f16
OUTPUT_DTYPES = {"float32": ("f32", "fp32"), "bfloat16": ("f16", "fp16")}
EXPORTERS = (
    "mobius",
    "torch-dynamo",
    "transformers-exporters",
    "ort-genai-builder",
    "cp",
    "mobius-base",  # mobius from another source tree (--base-tree): before/after comparisons
)
BASE_TREE: Path | None = None
BUILDER_CAP_BYTES: int | None = None  # --builder-cap-gib, applied to the big models only
PACKAGES = (
    "mobius",
    "torch",
    "transformers",
    "onnx",
    "onnx-ir",
    "onnxscript",
    "onnxruntime",
    "onnxruntime-genai",
    "safetensors",
    "tokenizers",
    "numpy",
)


# ---------------------------------------------------------------- checkpoints


def make_checkpoint(name: str, workdir: Path) -> Path:
    """Create the checkpoint ``name`` once, in a subprocess (keeps this process small); reuse it after."""
    directory = workdir / "ckpt" / name
    if (directory / "config.json").is_file() and any(directory.glob("*.safetensors")):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    print(f"creating checkpoint {name} in {directory} (once) ...", flush=True)
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import convert; "
        f"convert._create({name!r}, {str(directory)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    return directory


def _create(name: str, directory: str) -> None:
    tmp = Path(directory + ".partial")
    for path in (tmp, Path(directory)):
        shutil.rmtree(path, ignore_errors=True)
    if MODELS[name] is None:  # the bundled tiny Llama, tokenizer included
        shutil.copytree(REPO / "examples" / "tiny-llama", tmp)
        tmp.rename(directory)
        return
    spec, dtype = MODELS[name]
    checkpoints.write_checkpoint(spec, Path(directory), dtype)  # streaming, tensor by tensor


def output_dtypes(name: str) -> tuple[str, str]:
    """(mobius --dtype, builder -p) for model ``name``."""
    return OUTPUT_DTYPES[MODELS[name][1] if MODELS[name] else "float32"]


def command(exporter: str, checkpoint: Path, output: Path, dtype: str = "f32") -> list[str]:
    if exporter in ("mobius", "mobius-base"):
        return [sys.executable, "-m", "mobius", "build", "--model", str(checkpoint)] + [
            "--output",
            str(output),
            "--dtype",
            dtype,
            "--overwrite",
            "-q",
        ]
    if exporter == "cp":  # the floor: copying the checkpoint's bytes
        return ["cp", "-r", str(checkpoint), str(output)]
    if exporter == "ort-genai-builder":
        cmd = peers.export_ort_genai(checkpoint, output)
        cmd[cmd.index("-p") + 1] = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}[dtype]
        if BUILDER_CAP_BYTES:  # its address space capped: it cannot take the machine's memory
            return ["prlimit", f"--as={BUILDER_CAP_BYTES}", "--", *cmd]
        return cmd
    fn = {"torch-dynamo": "export_torch_dynamo", "transformers-exporters": "export_transformers"}
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import peers; "
        f"peers.{fn[exporter]}(peers.Path({str(checkpoint)!r}), peers.Path({str(output)!r}))"
    )
    return [sys.executable, "-c", code]


def run_once(
    exporter: str,
    checkpoint: Path,
    output: Path,
    interval: float,
    timeout: float,
    dtype: str = "f32",
) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    shutil.rmtree(output.parent / (output.name + ".cache"), ignore_errors=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["sync"], check=False)  # the previous run's dirty pages are not this run's
    cwd = BASE_TREE if exporter == "mobius-base" and BASE_TREE else REPO
    run = measure(command(exporter, checkpoint, output, dtype), timeout, interval, cwd)
    if exporter == "cp":
        shutil.rmtree(output, ignore_errors=True)
    elif "error" not in run and not list(output.rglob("*.onnx")):
        run["error"] = "no .onnx file written"
    shutil.rmtree(output.parent / (output.name + ".cache"), ignore_errors=True)
    return run


def graph_stats(output: Path) -> dict:
    """Size on disk, node count and op histogram of the produced model (the biggest .onnx)."""
    import onnx

    size = sum(p.stat().st_size for p in output.rglob("*") if p.is_file())
    models = sorted(output.rglob("*.onnx"), key=lambda p: p.stat().st_size)
    if not models:
        return {"output_bytes": size}
    path = models[-1] if len(models) == 1 else _main_onnx(models)
    model = onnx.load(str(path), load_external_data=False)
    ops: collections.Counter = collections.Counter()

    def walk(graph):
        for node in graph.node:
            ops[
                (node.domain + "::" if node.domain not in ("", "ai.onnx") else "") + node.op_type
            ] += 1
            for attr in node.attribute:
                if attr.g is not None and attr.g.node:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(model.graph)
    top_level = sum(ops.values())
    fn_ops: collections.Counter = collections.Counter()
    for fn in model.functions:
        for node in fn.node:
            fn_ops[node.op_type] += 1
    return {
        "output_bytes": size,
        "onnx_file": str(path.relative_to(output)),
        "onnx_files": len(models),
        "nodes": top_level,
        "ops": dict(ops.most_common()),
        "function_nodes": sum(fn_ops.values()),
        "opset": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": [i.name for i in model.graph.input],
        "outputs": [o.name for o in model.graph.output],
        "initializers": len(model.graph.initializer),
    }


def _main_onnx(models: list[Path]) -> Path:
    for p in models:
        if p.name == "model.onnx":
            return p
    return models[-1]


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
    }


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"ok": False}
    walls = [r["wall_s"] for r in ok]
    rss = [r["peak_rss_bytes"] for r in ok]
    return {
        "ok": True,
        "n": len(ok),
        "wall_s_median": round(statistics.median(walls), 2),
        "wall_s_min": min(walls),
        "wall_s_max": max(walls),
        "peak_rss_mib_median": round(statistics.median(rss) / MiB),
        "peak_rss_mib_min": round(min(rss) / MiB),
        "peak_rss_mib_max": round(max(rss) / MiB),
    }


def largest_tensor_bytes(checkpoint: Path) -> int:
    """The largest tensor's size in bytes, from the safetensors headers alone."""
    best = 0
    for f in checkpoint.glob("*.safetensors"):
        with f.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for key, info in header.items():
            if key != "__metadata__":
                start, stop = info["data_offsets"]
                best = max(best, stop - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-bench"))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--exporters", nargs="+", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--timeout", type=float, default=1200.0, help="per conversion, seconds")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--big", action="store_true", help="add the 16 GB Llama-3.1-8B checkpoint (deleted after)"
    )
    parser.add_argument(
        "--no-profile", action="store_true", help="skip the phase split of one mobius run per model"
    )
    parser.add_argument(
        "--docs", type=Path, default=REPO / "docs" / "benchmarks.md", help="tables go here"
    )
    parser.add_argument(
        "--base-tree", type=Path, help="a source tree of mobius to time as exporter mobius-base"
    )
    parser.add_argument(
        "--builder-cap-gib",
        type=float,
        default=12.0,
        help="address-space cap (prlimit --as) of the builder on the --big models (0: none)",
    )
    parser.add_argument(
        "--base-label", default=None, help="what mobius-base is, in the tables (e.g. a commit)"
    )
    args = parser.parse_args(argv)
    global BASE_TREE, BUILDER_CAP_BYTES
    BASE_TREE = args.base_tree
    if args.big:
        args.models = [*args.models, *(m for m in BIG if m not in args.models)]

    result = {
        "benchmark": "convert",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "repeat": args.repeat,
        "order": "exporters alternate inside each repeat (A B C D, A B C D, ...)",
        "models": {},
    }
    old_models: dict = {}
    if args.results.is_file():  # keep other models' (and exporters') results from an earlier run
        old_models = json.loads(args.results.read_text()).get("models", {})
        result["models"] = {k: v for k, v in old_models.items() if k not in args.models}

    for name in args.models:
        if MODELS[name] is not None:
            print(f"disk: {shutil.disk_usage(args.workdir.parent).free / 2**30:.0f} GiB free")
        checkpoint = make_checkpoint(name, args.workdir)
        dtype, _ = output_dtypes(name)
        ckpt_bytes = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
        entry = {
            "checkpoint": str(checkpoint),
            "checkpoint_bytes": ckpt_bytes,
            "largest_tensor_bytes": largest_tensor_bytes(checkpoint),
            "config": json.loads((checkpoint / "config.json").read_text()),
            "mobius_dtype": dtype,
            "exporters": {e: {"runs": []} for e in args.exporters},
        }
        if "mobius-base" in args.exporters and args.base_label:
            entry["exporters"]["mobius-base"]["label"] = args.base_label
        previous = result["models"].get(name) or old_models.get(name)
        if previous:  # keep the other exporters' results from an earlier run on this model
            for exporter, rec in previous.get("exporters", {}).items():
                if exporter not in args.exporters:
                    entry["exporters"][exporter] = rec
        result["models"][name] = entry
        failed: set[str] = set()
        for rep in range(args.repeat):
            for exporter in args.exporters:
                if exporter in failed:  # a deterministic failure is recorded once, not retried
                    continue
                output = args.workdir / "out" / name / exporter
                cap = int(args.builder_cap_gib * 2**30) if name in BIG else 0
                BUILDER_CAP_BYTES = cap or None
                if cap and exporter == "ort-genai-builder":
                    entry["exporters"][exporter]["address_space_cap_bytes"] = cap
                run = run_once(exporter, checkpoint, output, args.interval, args.timeout, dtype)
                entry["exporters"][exporter]["runs"].append(run)
                status = "FAILED" if "error" in run else "ok"
                print(
                    f"{name:13s} rep {rep + 1} {exporter:24s} {status:6s} {run['wall_s']:7.1f} s "
                    f"peak {run['peak_rss_bytes'] / MiB:6.0f} MiB load {run['load_1min_before']:.1f}",
                    flush=True,
                )
                if "error" in run:
                    failed.add(exporter)
                    print("   ", run["error"].strip().splitlines()[-1][:300], flush=True)
                elif rep == 0 and exporter != "cp":
                    entry["exporters"][exporter]["graph"] = graph_stats(output)
                if name in BIG:  # 16 GB each: one output on disk at a time
                    shutil.rmtree(output, ignore_errors=True)
                args.results.parent.mkdir(parents=True, exist_ok=True)
                args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        for exporter in entry["exporters"]:
            e = entry["exporters"][exporter]
            e["repeats"] = len(e["runs"])
            e["summary"] = summarize(e["runs"])
            if e["runs"] and "error" in e["runs"][-1]:
                e["error"] = e["runs"][-1]["error"]
        if "mobius" in args.exporters and not args.no_profile:
            output = args.workdir / "out" / name / "mobius-phases"
            entry["phases"] = convert_phases.run(checkpoint, output, dtype, args.timeout)
            print(f"{name:13s} phases {json.dumps(entry['phases'])[:300]}", flush=True)
        if name in BIG:  # 16 GB each: neither the checkpoint nor the outputs are kept
            shutil.rmtree(checkpoint, ignore_errors=True)
            shutil.rmtree(args.workdir / "out" / name, ignore_errors=True)
        args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.results}")
    if args.docs:
        convert_tables.write(result, args.docs, args.results)
        print(f"wrote the tables into {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
