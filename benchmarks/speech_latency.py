"""Speech-LLM transcription latency (issue 30): a converted GLM-ASR in onnxruntime against the
same model in PyTorch, on a tiny-but-realistic config.

The model: ``glmasr`` with a 4-layer Whisper-style audio tower (d_model 384, 6 heads, 128 mel
bins) and a 4-layer Llama text decoder (hidden 512, 8 heads, 2 key/value heads, intermediate
1536, vocab 32000), every parameter random (std 0.02), float32. It is saved once in
``--workdir`` and converted with ``mobius.build`` (no task: the three audio graphs).

One transcription: a 10 s clip (1000 mel frames, 125 audio tokens) with a 12-token prompt,
greedy decoding of ``--new-tokens`` tokens with no stop. onnxruntime: ``audio_encoder`` →
``embedding`` → ``decoder_model`` prefill and one step per token, cache fed back
(``mobius.runtime.audio_generate.greedy_tokens``); PyTorch: HF ``generate`` on the same inputs
(sdpa attention, ``torch.inference_mode``). Both on the CPU with ``--threads`` threads. The two
alternate inside each round (A B, A B, ...) after one warm-up each; medians over the rounds and
their ratio are reported, and the greedy tokens are checked equal. Results:
``benchmarks/results/speech_latency.json``.

    python benchmarks/speech_latency.py [--rounds 7] [--new-tokens 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "speech_latency.json"
AUDIO_TOKEN = 31999
CONFIG = {
    "audio_token_id": AUDIO_TOKEN,
    "audio_config": {
        "hidden_size": 384,
        "intermediate_size": 1536,
        "num_hidden_layers": 4,
        "num_attention_heads": 6,
        "num_key_value_heads": 6,
        "num_mel_bins": 128,
    },
    "text_config": {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    },
}


def checkpoint(workdir: Path) -> Path:
    from transformers import AutoConfig

    from mobius.tasks.audio_llm import _Auto

    directory = workdir / "glmasr-bench"
    if (directory / "config.json").is_file():
        return directory
    config = AutoConfig.for_model("glmasr", **CONFIG)
    torch.manual_seed(0)
    model = _Auto.from_config(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    model.save_pretrained(directory)
    return directory


def inputs(frames: int = 1000, prompt: int = 12) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    tokens = ((frames + 2 - 2 - 1) // 2 + 1 - 4) // 4 + 1  # GLM-ASR's conv and merge lengths
    text = rng.integers(3, 30000, prompt)
    ids = np.concatenate([text[:4], np.full(tokens, AUDIO_TOKEN), text[4:]])[None]
    return {
        "input_ids": ids.astype(np.int64),
        "attention_mask": np.ones_like(ids, dtype=np.int64),
        "input_features": rng.normal(0, 1, (1, 128, frames)).astype(np.float32),
        "input_features_mask": np.ones((1, frames), dtype=np.int64),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-bench"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import mobius
    from mobius.runtime.audio_generate import greedy_tokens
    from mobius.runtime.audio_llm import OnnxAudioLanguageModel
    from mobius.tasks.audio_llm import _Auto
    from mobius.testing.vlm import hf_generate

    source = checkpoint(args.workdir)
    out = args.workdir / "glmasr-bench-onnx"
    if not (out / "mobius.json").is_file():
        mobius.build(source).save(out)
    runner = OnnxAudioLanguageModel(out, threads=args.threads)
    model = _Auto.from_pretrained(source, attn_implementation="sdpa").eval()
    feeds = inputs()
    torch_feeds = {k: torch.from_numpy(v) for k, v in feeds.items()}

    def onnx() -> list[int]:
        return list(greedy_tokens(runner, feeds, args.new_tokens))

    def pytorch() -> list[int]:
        with torch.inference_mode():
            return hf_generate(model, torch_feeds, args.new_tokens)[0][0].tolist()

    times: dict[str, list[float]] = {"onnxruntime": [], "pytorch": []}
    tokens = {"onnxruntime": onnx(), "pytorch": pytorch()}  # warm-up
    for _ in range(args.rounds):
        for name, run in (("onnxruntime", onnx), ("pytorch", pytorch)):
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    medians = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": "glmasr (audio 4x384, text 4x512, vocab 32000), float32",
        "clip": {"frames": 1000, "audio_tokens": int((feeds["input_ids"] == AUDIO_TOKEN).sum())},
        "prompt_tokens": int(feeds["input_ids"].shape[1]),
        "new_tokens": args.new_tokens,
        "threads": args.threads,
        "rounds": args.rounds,
        "seconds": times,
        "median_s": medians,
        "onnxruntime_over_pytorch": medians["onnxruntime"] / medians["pytorch"],
        "tokens_equal": tokens["onnxruntime"] == tokens["pytorch"],
        "versions": {
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "onnxruntime": __import__("onnxruntime").__version__,
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps({k: result[k] for k in ("median_s", "onnxruntime_over_pytorch", "tokens_equal")})
    )


if __name__ == "__main__":
    main()
