"""Diffusers benchmark (issue 18, item 6): an SD-1.5-shaped UNet, mobius against its peers.

A random-weight ``UNet2DConditionModel`` with Stable Diffusion 1.5's config (block_out_channels
320/640/1280/1280, two layers per block, cross-attention 768, 8 heads; 860M parameters, float32,
~3.4 GB) is saved once in ``--workdir`` (default ``/tmp/mobius-bench-diffusers``) as a diffusers
model directory (``diffusion_pytorch_model.safetensors``). It is created on the meta device,
materialised with ``to_empty`` and randomised tensor by tensor (scaled normal: activations stay
finite through the 16 resolution blocks), so creating it holds one copy of the weights.

Converted (float32) by:

- ``mobius``: ``python -m mobius build --model CKPT --output OUT -q``
- ``torch-dynamo``: ``torch.onnx.export(model, ..., dynamo=True)``, batch/height/width
  ``Dim.AUTO`` (dynamic where the trace allows), external data

Each conversion is a subprocess: wall time, CPU time (the child's rusage) and peak RSS as in
``convert.py``; exporters alternate inside each repeat; medians. Then onnxruntime (CPU,
``intra_op_num_threads=--threads``) runs each graph on batch 2, 4x64x64 latents, 77 text tokens:
one warm-up then ``--iters`` timed calls, median; outputs compared with PyTorch.

    python benchmarks/diffusers_speed.py [--repeat 2] [--iters 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
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
from encoder_speed import onnx_file, session  # noqa: E402  (the same ORT timing functions)

RESULTS = HERE / "results" / "diffusers_speed.json"
EXPORTERS = ("mobius", "torch-dynamo")
SD15_UNET = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (320, 640, 1280, 1280),
    "layers_per_block": 2,
    "down_block_types": ("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    "up_block_types": ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
    "norm_num_groups": 32,
}
BATCH, LATENT, TOKENS = 2, 64, 77


def make_checkpoint(workdir: Path) -> Path:
    """The random SD-1.5-shaped UNet, saved once (in a subprocess: keeps us small)."""
    directory = workdir / "ckpt" / "sd15-unet"
    if (directory / "config.json").is_file() and any(directory.glob("*.safetensors")):
        return directory
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import diffusers_speed as d; d._create({str(directory)!r})"
    subprocess.run([sys.executable, "-c", code], check=True)
    return directory


def _create(directory: str) -> None:
    import torch
    from diffusers import UNet2DConditionModel

    gen = torch.Generator().manual_seed(0)
    with torch.device("meta"):
        model = UNet2DConditionModel(**SD15_UNET)
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.dim() >= 2:  # weights: normal, std 1/sqrt(fan_in)
                fan_in = math.prod(tensor.shape[1:])
                tensor.normal_(0.0, 1.0 / math.sqrt(fan_in), generator=gen)
            elif name.endswith("weight"):  # norm scales around 1
                tensor.normal_(1.0, 0.1, generator=gen)
            else:  # biases, small
                tensor.normal_(0.0, 0.02, generator=gen)
    tmp = Path(directory + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tmp.rename(directory)


def sample(batch: int = BATCH, size: int = LATENT) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "sample": rng.standard_normal((batch, 4, size, size), dtype=np.float32),
        "timestep": np.linspace(1.0, 999.0, batch, dtype=np.float32),
        "encoder_hidden_states": rng.standard_normal((batch, TOKENS, 768), dtype=np.float32),
    }


def _load(checkpoint: Path):
    import torch
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel.from_pretrained(checkpoint, torch_dtype=torch.float32).eval()


class _Plain:
    """``UNet2DConditionModel`` returning its tensor (not a dataclass) for the exporter."""

    @staticmethod
    def wrap(model):
        import torch

        class Unet(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.unet = model

            def forward(self, sample, timestep, encoder_hidden_states):
                return self.unet(sample, timestep, encoder_hidden_states, return_dict=False)[0]

        return Unet().eval()


def export_torch_dynamo(checkpoint: Path, output: Path) -> None:
    import torch

    model = _Plain.wrap(_load(checkpoint))
    feeds = {k: torch.from_numpy(v) for k, v in sample(2, 16).items()}
    auto = torch.export.Dim.AUTO
    shapes = {
        "sample": {0: auto, 2: auto, 3: auto},
        "timestep": {0: auto},
        "encoder_hidden_states": {0: auto, 1: auto},
    }
    output.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.onnx.export(
            model,
            (),
            kwargs=feeds,
            dynamo=True,
            dynamic_shapes=shapes,
            input_names=list(feeds),
            output_names=["out_sample"],
            external_data=True,
        )
    program.save(str(output / "model.onnx"), external_data=True)


def command(exporter: str, checkpoint: Path, output: Path) -> list[str]:
    if exporter == "mobius":
        build = ["build", "--model", str(checkpoint), "--output", str(output), "--overwrite"]
        return [sys.executable, "-m", "mobius", *build, "-q"]
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import diffusers_speed as d; "
        f"d.export_torch_dynamo(d.Path({str(checkpoint)!r}), d.Path({str(output)!r}))"
    )
    return [sys.executable, "-c", code]


def latency(paths: dict[str, Path], checkpoint: Path, threads: int, iters: int) -> dict:
    import torch

    feeds = sample()
    with torch.no_grad():
        model = _load(checkpoint)
        reference = model(*(torch.from_numpy(v) for v in feeds.values())).sample.numpy()
    del model
    scale = float(np.abs(reference).max())
    result = {}
    for name, path in paths.items():
        sess = session(path, threads)
        order = [i.name for i in sess.get_inputs()]
        feed = dict(zip(order, feeds.values(), strict=True))
        got = sess.run(None, feed)[0]  # warm-up
        times = []
        for _ in range(iters):
            started = time.perf_counter()
            sess.run(None, feed)
            times.append((time.perf_counter() - started) * 1000)
        del sess
        result[name] = {
            "median_ms": round(statistics.median(times), 1),
            "min_ms": round(min(times), 1),
            "max_ms": round(max(times), 1),
            "n": len(times),
            "max_abs_diff_vs_torch": float(np.abs(got - reference).max()),
            "torch_output_max_abs": scale,
        }
        print(f"ort {name:14s} {result[name]}", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-bench-diffusers"))
    parser.add_argument("--exporters", nargs="+", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    checkpoint = make_checkpoint(args.workdir)
    weights = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
    print(f"checkpoint {weights / 1e9:.2f} GB in {time.perf_counter() - started:.0f} s", flush=True)
    result = {
        "benchmark": "diffusers_speed",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": convert.machine(),
        "loadavg_start": Path("/proc/loadavg").read_text().strip(),
        "versions": convert.versions(),
        "config": SD15_UNET,
        "weights_bytes": weights,
        "order": "exporters alternate inside each repeat (A B, A B, ...)",
        "exporters": {},
    }
    runs: dict[str, list[dict]] = {e: [] for e in args.exporters}
    failed: set[str] = set()
    for rep in range(args.repeat):
        for exporter in args.exporters:
            if exporter in failed:
                continue
            output = args.workdir / "out" / exporter
            shutil.rmtree(output, ignore_errors=True)
            output.parent.mkdir(parents=True, exist_ok=True)
            run = convert.measure(command(exporter, checkpoint, output), args.timeout)
            if "error" not in run and not list(output.rglob("*.onnx")):
                run["error"] = "no .onnx file written"
            runs[exporter].append(run)
            status = "FAILED" if "error" in run else "ok"
            print(
                f"rep {rep + 1} {exporter:14s} {status:6s} {run['wall_s']:7.1f} s wall "
                f"{run['cpu_s']:7.1f} s cpu peak {run['peak_rss_bytes'] / convert.MiB:6.0f} MiB "
                f"load {run['load_1min_before']:.1f}",
                flush=True,
            )
            if "error" in run:
                failed.add(exporter)
                print("   ", run["error"].strip().splitlines()[-1][:300], flush=True)
    paths: dict[str, Path] = {}
    for exporter in args.exporters:
        output = args.workdir / "out" / exporter
        summary = convert.summarize(runs[exporter])
        ok = [r["cpu_s"] for r in runs[exporter] if "error" not in r]
        if ok:
            summary["cpu_s_median"] = round(statistics.median(ok), 2)
        result["exporters"][exporter] = {"runs": runs[exporter], "summary": summary}
        if summary["ok"]:
            result["exporters"][exporter]["graph"] = convert.graph_stats(output)
            paths[exporter] = onnx_file(output)
    result["runtime"] = {
        "batch": BATCH,
        "latents": [4, LATENT, LATENT],
        "text_tokens": TOKENS,
        "intra_op_num_threads": args.threads,
        "per_exporter": latency(paths, checkpoint, args.threads, args.iters),
    }
    result["loadavg_end"] = Path("/proc/loadavg").read_text().strip()
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v["summary"] for k, v in result["exporters"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
