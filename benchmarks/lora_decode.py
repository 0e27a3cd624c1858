"""LoRA serving cost on SmolLM2-135M (float32, CPU, onnxruntime-genai): greedy decode latency of
the base, the base with an ``.onnx_adapter`` active on a ``--lora-inputs`` graph, and the adapter
folded in (``--adapter``); and the size of the ``.onnx_adapter`` against the adapter's
safetensors. Writes benchmarks/results/lora_decode.json.

    python benchmarks/lora_decode.py [--rank 16] [--tokens 64]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).parent / "results" / "lora_decode.json"
LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def decode_ms(directory: Path, prompt: list[int], tokens: int, adapter: Path | None) -> float:
    """Median milliseconds per generated token (after the prompt), three runs."""
    import onnxruntime_genai as og

    from mobius.runtime.genai_adapters import GenaiAdapters

    model = og.Model(str(directory))
    adapters = GenaiAdapters(model)
    runs = []
    for _ in range(3):
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + tokens)
        generator = og.Generator(model, params)
        if adapter is not None:
            adapters.activate(generator, adapter)
        generator.append_tokens(np.array([prompt], dtype=np.int32))
        start, count = time.perf_counter(), 0
        while not generator.is_done():
            generator.generate_next_token()
            count += 1
        runs.append((time.perf_counter() - start) * 1000 / max(count, 1))
    return float(np.median(runs))


def main() -> None:
    from transformers import AutoModelForCausalLM

    from mobius.cli import main as mobius
    from mobius.testing.gguf import smollm2_gguf
    from mobius.testing.lora import save_float_checkpoint, write_adapter

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    gguf = smollm2_gguf()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hf = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        ).eval()
        base = save_float_checkpoint(hf, root / "checkpoint")
        adapter = write_adapter(hf, root / "adapter", LINEARS, r=args.rank, std=0.02)
        for name, flags in {
            "base": [],
            "served": ["--lora-inputs"],
            "folded": ["--adapter", str(adapter)],
        }.items():
            assert (
                mobius(["build", "--model", str(base), "--output", str(root / name), "-q", *flags])
                == 0
            )
        assert mobius(["adapter", str(adapter), "--model", str(root / "served"), "-q"]) == 0
        onnx_adapter = root / "served" / "adapter.onnx_adapter"
        prompt = list(range(100, 132))
        result = {
            "model": "SmolLM2-135M (f32 weights from the Q4_1 GGUF)",
            "adapter": {"rank": args.rank, "targets": LINEARS},
            "decode_ms_per_token": {
                "base": decode_ms(root / "base", prompt, args.tokens, None),
                "lora_inputs_no_adapter": decode_ms(root / "served", prompt, args.tokens, None),
                "lora_inputs_adapter_active": decode_ms(
                    root / "served", prompt, args.tokens, onnx_adapter
                ),
                "folded": decode_ms(root / "folded", prompt, args.tokens, None),
            },
            "bytes": {
                "adapter_model.safetensors": (adapter / "adapter_model.safetensors").stat().st_size,
                "onnx_adapter": onnx_adapter.stat().st_size,
            },
            "runtime": "onnxruntime-genai, CPU",
        }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
