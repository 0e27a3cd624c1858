"""Memory benchmark: peak RSS and wall time of ``mobius build`` on a Qwen2.5-0.5B-shaped checkpoint.

The checkpoint has random weights (float32, about 2 GB) and is created once in ``--workdir``.
Each conversion runs the CLI in a subprocess whose resident set size (including any children)
is sampled every ``--interval`` seconds with psutil; the kernel's ``ru_maxrss`` of the build
process is recorded as a cross-check. Results go to ``benchmarks/results/convert_memory.json``.

This script only measures; it never asserts on time or memory.

    python benchmarks/convert_memory.py [--workdir /tmp/mobius-bench] [--repeat 2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "convert_memory.json"
MiB = 1024 * 1024

# Qwen2.5-0.5B's shape; the weights are random.
QWEN2_05B = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
}
PACKAGES = (
    "mobius",
    "torch",
    "transformers",
    "onnx-ir",
    "onnx",
    "onnxruntime",
    "safetensors",
    "numpy",
    "psutil",
)


def make_checkpoint(directory: Path, seed: int = 0) -> Path:
    """Create the random-weight checkpoint once (in a subprocess); later calls reuse it.

    A subprocess keeps this process small: a child forked from a big parent inherits its memory
    high-water mark, which Linux folds into the child's ``ru_maxrss`` at exec.
    """
    if (directory / "config.json").is_file() and (directory / "model.safetensors").is_file():
        return directory
    print(f"creating checkpoint in {directory} (once) ...", flush=True)
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import convert_memory as m; m._create({str(directory)!r}, {seed})"
    subprocess.run([sys.executable, "-c", code], check=True)
    return directory


def _create(directory: str, seed: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    config = Qwen2Config(**QWEN2_05B, dtype="float32")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tmp = Path(directory + ".partial")
    for path in (tmp, Path(directory)):
        shutil.rmtree(path, ignore_errors=True)
    # one shard, like the real model; written aside and renamed so an interrupted run is not reused
    model.save_pretrained(tmp, max_shard_size="10GB")
    tmp.rename(directory)


def dir_bytes(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def tree_rss(proc: psutil.Process) -> tuple[int, int]:
    """(RSS, file-backed RSS) of ``proc`` and all its descendants, in bytes; (0, 0) once it has exited."""
    rss = shared = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    for p in procs:
        try:
            info = p.memory_info()
        except psutil.Error:
            continue
        rss += info.rss
        shared += info.shared  # resident file-backed pages (mmapped files, shared libraries)
    return rss, shared


def convert_once(
    checkpoint: Path, output: Path, interval: float, extra: list[str] | None = None
) -> dict:
    """Run one CLI conversion; return wall time and peak RSS (sampled, and as the kernel reports it)."""
    cmd = [
        sys.executable,
        "-m",
        "mobius",
        "build",
        "--model",
        str(checkpoint),
        "--output",
        str(output),
    ]
    cmd += [*(extra or []), "--overwrite", "-q"]
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        proc = psutil.Process(child.pid)
        peak = peak_anon = 0
        timeline: list[tuple[float, int]] = []
        while True:
            # wait4 reaps the child itself, so its own rusage (ru_maxrss) is available afterwards
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            rss, shared = tree_rss(proc)
            peak = max(peak, rss)
            peak_anon = max(peak_anon, rss - shared)
            timeline.append((round(time.perf_counter() - started, 3), rss))
            time.sleep(interval)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            log.seek(0)
            text = log.read().decode(errors="replace")
            raise SystemExit(f"mobius build failed (exit {child.returncode}):\n{text}")
    return {
        "wall_s": round(wall, 2),
        "peak_rss_bytes": peak,
        "peak_anon_rss_bytes": peak_anon,  # RSS minus file-backed pages, i.e. memory the process allocated
        "ru_maxrss_bytes": usage.ru_maxrss * 1024,  # KiB on Linux; the build process alone
        "samples": len(timeline),
        "timeline_s_mib": [
            (t, round(r / MiB)) for t, r in timeline[:: max(1, len(timeline) // 200)]
        ],
    }


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-bench"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--interval", type=float, default=0.05, help="RSS sampling period in seconds"
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--precision", choices=["int4", "int8"], help="pass --precision to the build"
    )
    args = parser.parse_args(argv)

    checkpoint = make_checkpoint(args.workdir / "qwen2-0.5b-random")
    output = args.workdir / "onnx"
    ckpt_bytes = dir_bytes(list(checkpoint.glob("*.safetensors")))

    runs = []
    for i in range(args.repeat):
        extra = ["--precision", args.precision] if args.precision else []
        run = convert_once(checkpoint, output, args.interval, extra)
        run["output_bytes"] = dir_bytes([output / "model.onnx", output / "model.onnx.data"])
        run["rss_over_checkpoint"] = round(run["peak_rss_bytes"] / ckpt_bytes, 3)
        runs.append(run)
        print(
            f"run {i + 1}/{args.repeat}: {run['wall_s']:.1f} s, peak RSS {run['peak_rss_bytes'] / MiB:.0f} MiB",
            flush=True,
        )

    print()
    print(f"checkpoint: {ckpt_bytes / MiB:.0f} MiB (float32 safetensors)")
    header = (
        "run",
        "wall s",
        "peak RSS MiB",
        "anon MiB",
        "ru_maxrss MiB",
        "output MiB",
        "RSS/ckpt",
    )
    print("  ".join(f"{h:>13}" for h in header))
    for i, r in enumerate(runs, 1):
        cells = (
            i,
            f"{r['wall_s']:.1f}",
            f"{r['peak_rss_bytes'] / MiB:.0f}",
            f"{r['peak_anon_rss_bytes'] / MiB:.0f}",
            f"{r['ru_maxrss_bytes'] / MiB:.0f}",
            f"{r['output_bytes'] / MiB:.0f}",
            f"{r['rss_over_checkpoint']:.3f}",
        )
        print("  ".join(f"{c:>13}" for c in cells))

    result = {
        "benchmark": "convert_memory",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "cpu_count_affinity": len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else None,
            "ram_bytes": psutil.virtual_memory().total,
        },
        "versions": versions(),
        "model": {"shape": "Qwen2.5-0.5B", "model_type": "qwen2", **QWEN2_05B, "dtype": "float32"},
        "precision": args.precision or "f32",
        "checkpoint_bytes": ckpt_bytes,
        "interval_s": args.interval,
        "runs": runs,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
