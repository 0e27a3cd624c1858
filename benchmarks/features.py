"""Memory and latency of the build features ``prune-prefill-prefix`` and ``static-cache``.

Random-weight llama checkpoints, converted with mobius once (``--workdir``, default
``/tmp/mobius-features-bench``), each feature applied to the same base graph. Every measurement
runs in its own subprocess (onnxruntime CPU, 2 intra-op threads), so peak RSS (``ru_maxrss``)
belongs to that run alone.

- **prune**: a tiny-but-wide-vocab model (hidden 64, 2 layers, ``--vocab`` 65536), one prefill of
  ``--prefill`` 4096 tokens, batch 1; peak RSS and RSS after the session loaded, with and without
  the feature.
- **static**: a small model (hidden 256, 4 layers, 8 heads, 2 kv heads, vocab 32000); a prompt
  of ``--prompt`` tokens, then ``--steps`` greedy decode steps: the growing cache
  (``OnnxCausalLM``, a new ``present`` per step) against the static buffers (``StaticCacheLM``,
  bound in place) at two ``--max-seq-len``; median and minimum step time, peak RSS, the cache's
  bytes and the bytes of cache a step allocates (the growing cache returns new ``present``
  arrays every step; the static buffers' addresses are checked unchanged after the last step).

Results: ``benchmarks/results/features.json``.

    nice python benchmarks/features.py [--only prune|static]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "features.json"

PRUNE_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
STATIC_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
}


def convert(workdir: Path, name: str, shape: dict) -> Path:
    """The base mobius build of a random llama of ``shape`` (made once)."""
    import mobius
    from mobius.testing.tiny import make_checkpoint

    out = workdir / name / "base"
    if not (out / "model.onnx").is_file():
        make_checkpoint("llama", workdir / name / "ckpt", **shape)
        mobius.build(workdir / name / "ckpt").save(out, overwrite=True)
    return out


def variant(base: Path, features: list[str], **options) -> Path:
    from mobius.features import apply_features
    from mobius.testing.features import load_package

    target = base.parent / ("-".join(features) + "".join(f"-{v}" for v in options.values()))
    if not (target / "model.onnx").is_file():
        apply_features(load_package(base), features, **options).save(target, overwrite=True)
    return target


PREFILL_RUN = """
import json, resource, sys, time, numpy as np, psutil
from mobius.runtime.causal_lm import OnnxCausalLM
lm = OnnxCausalLM(sys.argv[1], threads=2)
n = int(sys.argv[2])
loaded = psutil.Process().memory_info().rss
ids = np.random.default_rng(0).integers(0, 1000, (1, n))
t = time.perf_counter()
logits, _ = lm.run(ids, np.ones_like(ids), np.arange(n)[None], lm.empty_cache(1))
ms = (time.perf_counter() - t) * 1000
print(json.dumps({"logits_shape": list(logits.shape), "ms": round(ms, 1),
  "rss_loaded_mib": round(loaded / 2**20, 1),
  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""

DECODE_RUN = """
import json, resource, statistics, sys, time, numpy as np
from mobius.runtime.causal_lm import OnnxCausalLM
from mobius.runtime.static import StaticCacheLM
path, static, prompt, steps = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
ids = np.random.default_rng(0).integers(0, 1000, (1, prompt))
mask = np.ones_like(ids); positions = np.arange(prompt)[None]
lm = StaticCacheLM(path, threads=2) if static else OnnxCausalLM(path, threads=2)
if static:
    lm.reset(1); logits = lm.run(ids, mask, positions)
else:
    logits, cache = lm.run(ids, mask, positions, lm.empty_cache(1))
after_prefill = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
pointers = [b.data_ptr() for b in lm.buffers.values()] if static else None
times, tokens, fresh = [], [], []
for _ in range(steps):
    token = logits[:, -1].argmax(-1)[:, None]; tokens.append(int(token[0, 0]))
    mask = np.concatenate([mask, np.ones_like(token)], 1); positions = positions[:, -1:] + 1
    t = time.perf_counter()
    if static:
        logits = lm.run(token, mask, positions)
    else:
        logits, cache = lm.run(token, mask, positions, cache)
        fresh.append(sum(v.nbytes for v in cache.values()))  # new present arrays, every step
    times.append((time.perf_counter() - t) * 1000)
in_place = static and pointers == [b.data_ptr() for b in lm.buffers.values()]
cache_bytes = sum(b.numpy().nbytes for b in lm.buffers.values()) if static else fresh[-1]
print(json.dumps({"decode_median_ms": round(statistics.median(times), 3),
  "decode_min_ms": round(min(times), 3), "peak_rss_after_prefill_mib": round(after_prefill, 1),
  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
  "cache_bytes": cache_bytes, "new_cache_bytes_last_step": 0 if in_place else fresh[-1],
  "tokens": tokens}))
"""


def child(script: str, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", script, *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def prune(workdir: Path, vocab: int, prefill: int, repeat: int) -> dict:
    base = convert(workdir, f"wide-vocab-{vocab}", {**PRUNE_SHAPE, "vocab_size": vocab})
    pruned = variant(base, ["prune-prefill-prefix"])
    runs: dict[str, list[dict]] = {"full": [], "pruned": []}
    for _ in range(repeat):  # alternate
        runs["full"].append(child(PREFILL_RUN, str(base), str(prefill)))
        runs["pruned"].append(child(PREFILL_RUN, str(pruned), str(prefill)))
        print(runs["full"][-1], runs["pruned"][-1], flush=True)
    return {"vocab": vocab, "prefill_tokens": prefill, **PRUNE_SHAPE, "runs": runs}


def static(workdir: Path, prompt: int, steps: int, lengths: list[int], repeat: int) -> dict:
    base = convert(workdir, "static", STATIC_SHAPE)
    graphs = {"growing": (base, "0")}
    for length in lengths:
        graphs[f"static-{length}"] = (variant(base, ["static-cache"], max_seq_len=length), "1")
    runs: dict[str, list[dict]] = {name: [] for name in graphs}
    for _ in range(repeat):
        for name, (path, flag) in graphs.items():
            runs[name].append(child(DECODE_RUN, str(path), flag, str(prompt), str(steps)))
            print(name, {k: v for k, v in runs[name][-1].items() if k != "tokens"}, flush=True)
    same = len({tuple(r["tokens"]) for rs in runs.values() for r in rs}) == 1
    return {"prompt": prompt, "steps": steps, **STATIC_SHAPE, "same_tokens": same, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-features-bench"))
    parser.add_argument("--only", choices=["prune", "static"])
    parser.add_argument("--vocab", type=int, default=65536)
    parser.add_argument("--prefill", type=int, default=4096)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 4096])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    result = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    if args.only in (None, "prune"):
        result["prune"] = prune(args.workdir, args.vocab, args.prefill, args.repeat)
    if args.only in (None, "static"):
        result["static"] = static(args.workdir, args.prompt, args.steps, args.lengths, args.repeat)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
