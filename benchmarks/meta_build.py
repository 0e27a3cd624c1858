"""Meta-only build: time and peak RSS to trace and build the graph of large models without weights.

Writes ``config.json`` files shaped like Llama-3-8B, Mixtral-8x7B and Llama-3-70B (nothing else: no
weights exist) into ``WORKDIR/meta/<name>`` and runs, each in its own subprocess sampled with psutil
(see ``benchmarks/convert.py``), alternating A B C, A B C, ...:

- ``mobius build --model DIR --output OUT --no-weights -q`` (parameters become graph inputs; the
  graph is saved, so this includes emitting and writing the ONNX file);
- ``mobius explain --model DIR --json OUT -q`` (trace + pattern report, no ONNX emitted).

Results: ``benchmarks/results/meta_build.json``.

    python benchmarks/meta_build.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convert  # noqa: E402

RESULTS = HERE / "results" / "meta_build.json"
MiB = 1024 * 1024

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "torch_dtype": "bfloat16",
}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}
LLAMA3_70B = {
    **LLAMA3_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
}
DEEPSEEK_V3 = {  # DeepSeek-V3 (671B): MLA attention, 3 dense layers then 58 MoE layers of 256 experts
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "n_group": 8,
    "topk_group": 4,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "norm_topk_prob": True,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "bfloat16",
}
CONFIGS = {
    "llama-3-8b": LLAMA3_8B,
    "mixtral-8x7b": MIXTRAL_8X7B,
    "llama-3-70b": LLAMA3_70B,
    "deepseek-v3-671b": DEEPSEEK_V3,
}


def command(tool: str, model: Path, out: Path) -> list[str]:
    if tool == "build --no-weights":
        return [sys.executable, "-m", "mobius", "build", "--model", str(model), "--output"] + [
            str(out),
            "--no-weights",
            "--overwrite",
            "-q",
        ]
    return [sys.executable, "-m", "mobius", "explain", "--model", str(model)] + [
        "--json",
        str(out / "explain.json"),
        "-q",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-bench"))
    parser.add_argument("--models", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument(
        "--tools", nargs="+", default=["build --no-weights", "explain"], help="what to run"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    result = {
        "benchmark": "meta_build",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": convert.machine(),
        "versions": convert.versions(),
        "models": {},
    }
    for name in args.models:
        directory = args.workdir / "meta" / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(CONFIGS[name], indent=2))
        result["models"][name] = {"config": CONFIGS[name], "tools": {t: [] for t in args.tools}}

    for rep in range(args.repeat):
        for name in args.models:
            for tool in args.tools:
                out = args.workdir / "meta-out" / name / tool.split()[0]
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir(parents=True, exist_ok=True)
                cmd = command(tool, args.workdir / "meta" / name, out)
                run = convert.measure(cmd, timeout=900)
                if "error" not in run:
                    run["output_bytes"] = sum(
                        p.stat().st_size for p in out.rglob("*") if p.is_file()
                    )
                result["models"][name]["tools"][tool].append(run)
                print(
                    f"rep {rep + 1} {name:13s} {tool:20s} {'FAILED' if 'error' in run else 'ok':6s} "
                    f"{run['wall_s']:7.1f} s peak {run['peak_rss_bytes'] / MiB:6.0f} MiB "
                    f"load {run['load_1min_before']:.1f}",
                    flush=True,
                )
                if "error" in run:
                    print("   ", run["error"].strip().splitlines()[-1][:300], flush=True)
                shutil.rmtree(out, ignore_errors=True)
                args.results.parent.mkdir(parents=True, exist_ok=True)
                args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    for entry in result["models"].values():
        entry["summary"] = {}
        for tool, runs in entry["tools"].items():
            ok = [r for r in runs if "error" not in r]
            if ok:
                walls = [r["wall_s"] for r in ok]
                rss = [r["peak_rss_bytes"] / MiB for r in ok]
                entry["summary"][tool] = {
                    "wall_s_median": round(statistics.median(walls), 2),
                    "wall_s_min": min(walls),
                    "wall_s_max": max(walls),
                    "peak_rss_mib_median": round(statistics.median(rss)),
                    "peak_rss_mib_min": round(min(rss)),
                    "peak_rss_mib_max": round(max(rss)),
                }
    args.results.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
