"""GPU parity check, run when a GPU machine is lent (under 5 minutes; never part of CI).

    python benchmarks/gpu_check.py --ep cuda --out gpu_check.json
    python benchmarks/gpu_check.py --ep cpu --dtypes f32      # the same path on the CPU EP

For each case (f16, bf16, int4 with f16 activations) the bundled tiny Llama is built with
``--ep EP`` and run by onnxruntime on that provider: a left-padded batch of two, a prefill and
one-token decode steps through the KV cache (GroupQueryAttention on cuda). The logits are
compared with the HF model in float64 on the CPU (max |diff| relative to max |reference|), and
the greedy tokens with HF's. It measures and reports; it passes nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "tiny-llama"
CASES = {"f16": ["--dtype", "f16"], "bf16": ["--dtype", "bf16"], "f32": ["--dtype", "f32"]}
INT4 = ["--dtype", "f16", "--precision", "int4"]
PROVIDERS = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}


def _build(out: Path, ep: str, flags: list[str]) -> float:
    started = time.perf_counter()
    command = [sys.executable, "-m", "mobius", "build", "--model", str(MODEL), "--output", str(out)]
    subprocess.run([*command, "--ep", ep, "--no-cache", "-q", *flags], check=True, cwd=ROOT)
    return time.perf_counter() - started


def _ort_value(array: np.ndarray, kind: str, device: str):
    import onnxruntime as ort

    if kind == "tensor(bfloat16)":  # numpy has no bfloat16: ml_dtypes (onnx's dependency) does
        import ml_dtypes

        array = array.astype(ml_dtypes.bfloat16)
    return ort.OrtValue.ortvalue_from_numpy(array, device, 0)


def _run_case(directory: Path, ep: str, new_tokens: int) -> dict:
    import onnxruntime as ort
    from transformers import AutoModelForCausalLM

    device = "cuda" if ep == "cuda" else "cpu"
    runner = ort.InferenceSession(str(directory / "model.onnx"), providers=[PROVIDERS[ep]])
    inputs = {i.name: i for i in runner.get_inputs()}
    outputs = [o.name for o in runner.get_outputs()]
    reference = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float64).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, reference.config.vocab_size, (2, 7), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    past = {
        n: np.zeros([2 if d == "batch" else 0 if isinstance(d, str) else d for d in i.shape])
        for n, i in inputs.items()
        if n.startswith("past_key_values.")
    }
    worst, tokens, expected_tokens = 0.0, [], []
    cur_ids, cur_mask = ids, mask
    with torch.no_grad():
        ref_ids, ref_mask = ids, mask
        for _ in range(new_tokens):
            positions = (ref_mask.cumsum(-1) - 1).clamp(min=0)
            out = reference(input_ids=ref_ids, attention_mask=ref_mask, position_ids=positions)
            expected_tokens.append(out.logits[:, -1].argmax(-1))
            ref_ids = torch.cat([ref_ids, expected_tokens[-1][:, None]], 1)
            ref_mask = torch.cat([ref_mask, torch.ones_like(ref_mask[:, :1])], 1)
        full = reference(input_ids=ref_ids, attention_mask=ref_mask,
                         position_ids=(ref_mask.cumsum(-1) - 1).clamp(min=0)).logits  # fmt: skip
    step_start = 0
    for _ in range(new_tokens):
        positions = (cur_mask.cumsum(-1) - 1).clamp(min=0)[:, step_start:]
        feeds = {
            "input_ids": cur_ids[:, step_start:].numpy(),
            "attention_mask": cur_mask.numpy(),
            "position_ids": positions.numpy(),
        }
        feeds = {
            k: _ort_value(v.astype(np.int64), "tensor(int64)", device) for k, v in feeds.items()
        }
        for name, value in past.items():
            feeds[name] = (
                value if not isinstance(value, np.ndarray)
                else _ort_value(value.astype(np.float16 if "16" in inputs[name].type else
                                             np.float32), inputs[name].type, device)
            )  # fmt: skip
        results = dict(zip(outputs, runner.run_with_ort_values(outputs, feeds), strict=True))
        logits = results["logits"].numpy().astype(np.float64)
        length = cur_ids.shape[1]
        ref = full[:, length - logits.shape[1] : length].numpy()
        keep = cur_mask[:, step_start:].numpy().astype(bool)
        scale = max(1.0, float(np.abs(ref[keep]).max()))
        worst = max(worst, float(np.abs(logits - ref)[keep].max()) / scale)
        token = torch.from_numpy(logits[:, -1].argmax(-1))
        tokens.append(token)
        past = {n.replace("present.", "past_key_values.", 1): v for n, v in results.items()
                if n.startswith("present.")}  # fmt: skip
        step_start = cur_ids.shape[1]
        cur_ids = torch.cat([cur_ids, token[:, None]], 1)
        cur_mask = torch.cat([cur_mask, torch.ones_like(cur_mask[:, :1])], 1)
    nodes = {n.op_type for n in __import__("onnx").load(str(directory / "model.onnx"),
                                                         load_external_data=False).graph.node}  # fmt: skip
    return {
        "max_rel_diff": worst,
        "greedy_equal": bool(torch.equal(torch.stack(tokens), torch.stack(expected_tokens))),
        "gqa": "GroupQueryAttention" in nodes,
        "matmulnbits": "MatMulNBits" in nodes,
        "providers": runner.get_providers(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ep", choices=list(PROVIDERS), default="cuda")
    parser.add_argument("--dtypes", nargs="+", default=["f16", "bf16", "int4"])
    parser.add_argument("--new-tokens", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.dtypes:
            out = Path(tmp) / name
            try:
                seconds = _build(out, args.ep, INT4 if name == "int4" else CASES[name])
                results[name] = {
                    "build_s": round(seconds, 1),
                    **_run_case(out, args.ep, args.new_tokens),
                }
            except Exception as exc:  # measured and reported, not raised: the other cases still run
                results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(name, json.dumps(results[name]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
