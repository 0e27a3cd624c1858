"""LoRA serving cost on SmolLM2-135M (float32, CPU, onnxruntime-genai): greedy decode latency of
the base, the ``--lora-inputs`` graph with and without an ``.onnx_adapter`` active, and the
adapter folded in (``--adapter``); and the size of the ``.onnx_adapter`` against the adapter's
safetensors. The four are measured in turn, round after round (so a change in the machine's load
hits them alike), and reported as medians and ratios. Writes benchmarks/results/lora_decode.json.

    python benchmarks/lora_decode.py [--rank 16] [--tokens 64] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results" / "lora_decode.json"
RATIOS = [
    ("lora_inputs_adapter_active", "folded"),
    ("lora_inputs_adapter_active", "base"),
    ("lora_inputs_no_adapter", "base"),
    ("folded", "base"),
]
LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class Decoder:
    """One onnxruntime-genai model, and optionally one adapter to make active."""

    def __init__(self, directory: Path, adapter: Path | None) -> None:
        import onnxruntime_genai as og

        from mobius.runtime.genai_adapters import GenaiAdapters

        self.og, self.model, self.adapter = og, og.Model(str(directory)), adapter
        self.adapters = GenaiAdapters(self.model)

    def ms_per_token(self, prompt: list[int], tokens: int) -> float:
        """Milliseconds per generated token after the prompt, one greedy run."""
        og = self.og
        params = og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + tokens)
        generator = og.Generator(self.model, params)
        if self.adapter is not None:
            self.adapters.activate(generator, self.adapter)
        generator.append_tokens(np.array([prompt], dtype=np.int32))
        start, count = time.perf_counter(), 0
        while not generator.is_done():
            generator.generate_next_token()
            count += 1
        return (time.perf_counter() - start) * 1000 / max(count, 1)


def main() -> None:

    from mobius.cli import main as mobius
    from mobius.testing.gguf import hf_from_gguf, smollm2_gguf
    from mobius.testing.lora import save_float_checkpoint, write_adapter

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    gguf = smollm2_gguf()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hf = hf_from_gguf(gguf).eval()
        base = save_float_checkpoint(hf, root / "checkpoint")
        adapter = write_adapter(hf, root / "adapter", LINEARS, r=args.rank, std=0.02)
        del hf
        for name, flags in {
            "base": [],
            "served": ["--lora-inputs"],
            "folded": ["--adapter", str(adapter)],
        }.items():
            out = root / name
            assert mobius(["build", "--model", str(base), "--output", str(out), "-q", *flags]) == 0
        assert mobius(["adapter", str(adapter), "--model", str(root / "served"), "-q"]) == 0
        onnx_adapter = root / "served" / "adapter.onnx_adapter"
        decoders = {
            "base": Decoder(root / "base", None),
            "lora_inputs_no_adapter": Decoder(root / "served", None),
            "lora_inputs_adapter_active": Decoder(root / "served", onnx_adapter),
            "folded": Decoder(root / "folded", None),
        }
        prompt = list(range(100, 132))
        for decoder in decoders.values():  # warm up: first-run allocations
            decoder.ms_per_token(prompt, 8)
        runs: dict[str, list[float]] = {name: [] for name in decoders}
        for _ in range(args.rounds):
            for name, decoder in decoders.items():
                runs[name].append(decoder.ms_per_token(prompt, args.tokens))
        median = {name: statistics.median(values) for name, values in runs.items()}
        sizes = {
            "adapter_model.safetensors": (adapter / "adapter_model.safetensors").stat().st_size,
            "onnx_adapter": onnx_adapter.stat().st_size,
        }
    result = {
        "model": "SmolLM2-135M (f32 weights from the Q4_1 GGUF)",
        "adapter": {"rank": args.rank, "targets": LINEARS},
        "prompt_tokens": len(prompt),
        "new_tokens": args.tokens,
        "rounds": args.rounds,
        "decode_ms_per_token_median": median,
        "decode_ms_per_token_runs": runs,
        # each round's ratio (its runs minutes apart at most), then the median over rounds
        "ratios_median_of_rounds": {
            f"{a} / {b}": statistics.median(x / y for x, y in zip(runs[a], runs[b], strict=True))
            for a, b in RATIOS
        },
        "ratios_of_medians": {f"{a} / {b}": median[a] / median[b] for a, b in RATIOS},
        "bytes": sizes,
        "onnx_adapter / safetensors": sizes["onnx_adapter"] / sizes["adapter_model.safetensors"],
        "runtime": "onnxruntime-genai, CPU",
        "load_average_at_end": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    shown = ("decode_ms_per_token_median", "ratios_median_of_rounds", "ratios_of_medians")
    print(json.dumps({k: result[k] for k in shown}, indent=2))


if __name__ == "__main__":
    main()
