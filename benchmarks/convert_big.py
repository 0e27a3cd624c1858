"""Big-model benchmark: a ~3 GB sharded checkpoint converts, runs in onnxruntime, and memory stays flat.

A random-weight, Llama-shaped float32 checkpoint of about 3 GB is written straight to safetensors
shards plus ``model.safetensors.index.json`` (no model is instantiated: each tensor is generated,
written and freed). ``mobius build`` converts it in a subprocess whose resident set size is sampled
(see ``convert_memory.py``), and the result is loaded in onnxruntime, in another subprocess, for
one short forward with the KV-cache inputs empty. Recorded in ``benchmarks/results/convert_big.json``:
checkpoint size, largest tensor, peak RSS of the conversion, and the onnxruntime check.

This script only measures; it never asserts on time or memory. The checkpoint and the output are
deleted at the end unless ``--keep`` is given (about 6 GB of disk while it runs).

    python benchmarks/convert_big.py [--workdir /tmp/mobius-big] [--keep]
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
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from convert_memory import MiB, convert_once, dir_bytes, versions  # noqa: E402

RESULTS = HERE / "results" / "convert_big.json"

# Llama-shaped; 5 layers keep it near 3 GB with a 128k vocabulary (the embedding is ~1 GB).
CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 5,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "dtype": "float32",
}
SHARD_BYTES = 1024 * MiB


def tensor_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    """State-dict keys and shapes of LlamaForCausalLM for config ``c``."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    shapes = {"model.embed_tokens.weight": (v, h)}
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q, h),
                p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h),
                p + "self_attn.o_proj.weight": (h, q),
                p + "post_attention_layernorm.weight": (h,),
                p + "mlp.gate_proj.weight": (i, h),
                p + "mlp.up_proj.weight": (i, h),
                p + "mlp.down_proj.weight": (h, i),
            }
        )
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (v, h)
    return shapes


def make_checkpoint(directory: Path, seed: int = 0) -> Path:
    """Write the sharded random checkpoint once (in a subprocess, to keep this process small)."""
    if (directory / "model.safetensors.index.json").is_file():
        return directory
    print(f"creating a sharded checkpoint in {directory} (once) ...", flush=True)
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import convert_big as m; m._create({str(directory)!r}, {seed})"
    subprocess.run([sys.executable, "-c", code], check=True)
    return directory


def _create(directory: str, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    tmp = Path(directory + ".partial")
    for path in (tmp, Path(directory)):
        shutil.rmtree(path, ignore_errors=True)
    tmp.mkdir(parents=True)
    shapes = tensor_shapes(CONFIG)
    groups: list[list[str]] = [[]]
    size = 0
    for key, shape in shapes.items():
        nbytes = 4 * int(torch.Size(shape).numel())
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += nbytes
    weight_map, total = {}, 0
    for n, keys in enumerate(groups, 1):
        name = f"model-{n:05d}-of-{len(groups):05d}.safetensors"
        shard = {}
        for key in keys:  # norms near 1, matrices scaled like a real init
            t = torch.randn(shapes[key])
            shard[key] = 1 + 0.1 * t if t.dim() == 1 else t * 0.02
        save_file(shard, tmp / name, metadata={"format": "pt"})
        total += sum(t.numel() * 4 for t in shard.values())
        weight_map.update(dict.fromkeys(keys, name))
        del shard
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (tmp / "config.json").write_text(json.dumps(CONFIG, indent=2))
    tmp.rename(directory)


def run_onnx(output: Path, interval: float) -> dict:
    """Load the converted model in onnxruntime (subprocess) and run one forward, empty cache."""
    code = r"""
import json, sys, time
import numpy as np
from mobius.testing.parity import OnnxCausalLM
started = time.perf_counter()
lm = OnnxCausalLM(sys.argv[1])
loaded = time.perf_counter() - started
ids = np.array([[1, 15, 27, 300, 4000, 51234, 128000]], dtype=np.int64)
mask = np.ones_like(ids)
positions = np.arange(ids.shape[1], dtype=np.int64)[None]
started = time.perf_counter()
logits, cache = lm.run(ids, mask, positions, lm.empty_cache(1))
ran = time.perf_counter() - started
print(json.dumps({
    "load_s": round(loaded, 2), "forward_s": round(ran, 3),
    "logits_shape": list(logits.shape), "logits_finite": bool(np.isfinite(logits).all()),
    "present_shape": list(next(iter(cache.values())).shape),
    "kv_cache_inputs": len(lm.cache_names),
}))
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(output)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    p = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, p.memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(interval)
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"onnxruntime check failed:\n{err.decode(errors='replace')}")
    return {**json.loads(out.decode().strip().splitlines()[-1]), "peak_rss_bytes": peak}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-big"))
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and the output")
    args = parser.parse_args(argv)

    checkpoint = make_checkpoint(args.workdir / "llama-3gb-random")
    output = args.workdir / "onnx"
    shards = sorted(checkpoint.glob("*.safetensors"))
    ckpt_bytes = dir_bytes(shards)
    shapes = tensor_shapes(CONFIG)
    largest_key = max(shapes, key=lambda k: _numel(shapes[k]))
    largest = 4 * _numel(shapes[largest_key])
    try:
        run = convert_once(checkpoint, output, args.interval)
        run["output_bytes"] = dir_bytes([output / "model.onnx", output / "model.onnx.data"])
        onnx_check = run_onnx(output, args.interval)
    finally:
        if not args.keep:
            shutil.rmtree(output, ignore_errors=True)
            shutil.rmtree(checkpoint, ignore_errors=True)
    peak = run["peak_rss_bytes"]
    summary = {
        "checkpoint_bytes": ckpt_bytes,
        "shards": len(shards),
        "largest_tensor": largest_key,
        "largest_tensor_bytes": largest,
        "peak_rss_bytes": peak,
        "peak_rss_over_checkpoint": round(peak / ckpt_bytes, 3),
        "peak_rss_minus_largest_tensor_bytes": peak - largest,
    }
    print(f"checkpoint     {ckpt_bytes / MiB:8.0f} MiB in {len(shards)} shards + index")
    print(f"largest tensor {largest / MiB:8.0f} MiB ({largest_key})")
    print(f"convert        {run['wall_s']:8.1f} s")
    print(
        f"peak RSS       {peak / MiB:8.0f} MiB = {peak / ckpt_bytes:.2f} x checkpoint, "
        f"largest tensor + {(peak - largest) / MiB:.0f} MiB"
    )
    print(f"output         {run['output_bytes'] / MiB:8.0f} MiB (model.onnx + model.onnx.data)")
    print(
        f"onnxruntime    load {onnx_check['load_s']} s, forward {onnx_check['forward_s']} s, "
        f"logits {onnx_check['logits_shape']} finite={onnx_check['logits_finite']}, "
        f"peak RSS {onnx_check['peak_rss_bytes'] / MiB:.0f} MiB"
    )
    result = {
        "benchmark": "convert_big",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "ram_bytes": psutil.virtual_memory().total,
        },
        "versions": versions(),
        "model": {"shape": "llama, random weights", **CONFIG},
        "summary": summary,
        "convert": run,
        "onnxruntime": onnx_check,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.results}")
    return 0


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


if __name__ == "__main__":
    sys.exit(main())
