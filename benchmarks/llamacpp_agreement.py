"""Greedy tokens of mobius's GGUF conversions, against llama.cpp's own and HF's (issue 16, item 2).

For SmolLM2-135M-Instruct (Q4_1) and Gemma3-270M (Q4_K_M), the GGUF files of
``mobius.testing.gguf``, and the prompts of ``tests/mobius/real_weights_cases.py``, each prompt
gets ``--new-tokens`` (32) greedy tokens, never stopping at an end-of-sequence token, from:

- **mobius**: ``python -m mobius build --model FILE.gguf`` (variants: the default, and
  ``--accuracy-level 0`` and ``4``), run with onnxruntime on the CPU and the KV cache
  (``mobius.runtime.causal_lm.OnnxCausalLM``);
- **hf**: transformers' model loaded from the same file (``gguf_file=``), dequantized to float32,
  eager attention, ``generate`` (greedy);
- **llama.cpp**: ``benchmarks/llamacpp/greedy.mjs``, llama.cpp's own CPU inference through the
  npm package ``node-llama-cpp`` (prebuilt binaries; ``llama-cpp-python`` compiles from source).

All three are fed the same input ids, HF's tokenization, so that tokenizer differences do not count;
whether llama.cpp's own tokenization equals HF's is reported beside. Per prompt: the number of the
new tokens equal to llama.cpp's (and the first step where they differ) for mobius and HF, mobius
against HF, and at a divergence each side's logit margin (top-1 minus top-2) there. llama.cpp and
each mobius build are also run teacher-forced along HF's tokens, their logits of HF's top-2 tokens
compared with HF's at every step (how far the margins move, and where the top-1 differs).
``--llamacpp-kv-cache f32`` gives llama.cpp an f32 KV cache without flash attention (default:
its own f16 cache).

    cd benchmarks/llamacpp && npm install   # once (node >= 20; about 725 MB of node_modules)
    PYTHONPATH=. python benchmarks/llamacpp_agreement.py [--work-dir /tmp/mobius-llamacpp]

Results: ``benchmarks/results/llamacpp_agreement.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / "llamacpp"
RESULTS = HERE / "results" / "llamacpp_agreement.json"
INSTALL_HINT = "run `cd benchmarks/llamacpp && npm install` (or `npm ci`) first"
# mobius build variants: name -> extra CLI flags
VARIANTS = {
    "default": [],
    "acc0": ["--accuracy-level", "0"],
    "acc4": ["--accuracy-level", "4"],
}


class Refusal(Exception):
    """A missing prerequisite: reported as one ``mobius: error:`` line, exit 2."""


def check_node() -> str:
    """The ``node`` executable, once node-llama-cpp is installed next to ``greedy.mjs``."""
    node = shutil.which("node")
    if node is None:
        raise Refusal(f"node (>= 20) is not on PATH; install Node.js, then {INSTALL_HINT}")
    if not (NODE_DIR / "node_modules" / "node-llama-cpp" / "package.json").is_file():
        raise Refusal(f"node-llama-cpp is not installed in {NODE_DIR}; {INSTALL_HINT}")
    return node


def gguf_files(work: Path, names: list[str]) -> dict[str, Path]:
    from mobius.testing.gguf import MissingWeightsPackage, gemma3_gguf, smollm2_gguf

    found = {}
    try:
        for name in names:
            found[name] = smollm2_gguf() if name == "smollm2" else gemma3_gguf(work / "gguf")
    except (MissingWeightsPackage, FileNotFoundError) as error:
        raise Refusal(str(error)) from None
    return found


def margins(logits: np.ndarray) -> list[tuple[int, int, float, float]]:
    """Per row of ``logits`` [steps, vocab]: (top-1 id, top-2 id, top-1 logit, top-2 logit)."""
    top = np.argsort(-logits, axis=-1)[:, :2]
    rows = np.arange(len(logits))
    first, second = logits[rows, top[:, 0]], logits[rows, top[:, 1]]
    return [
        (int(a), int(b), float(x), float(y))
        for (a, b), x, y in zip(top, first, second, strict=True)
    ]


def mobius_greedy(directory: Path, ids: list[int], new_tokens: int, threads: int) -> dict:
    """Greedy tokens of a mobius build with onnxruntime and its KV cache, and each step's margin."""
    from mobius.runtime.causal_lm import OnnxCausalLM

    lm = OnnxCausalLM(directory, threads=threads)
    tokens, steps = [], []
    ids_np = np.asarray([ids], dtype=np.int64)
    mask = np.ones_like(ids_np)
    positions = np.arange(len(ids), dtype=np.int64)[None]
    logits, cache = lm.run(ids_np, mask, positions, lm.empty_cache(1))
    for step in range(new_tokens):
        last = logits[0, -1].astype(np.float64)
        steps.append(last)
        token = int(last.argmax())
        tokens.append(token)
        if step + 1 < new_tokens:
            mask = np.concatenate([mask, [[1]]], axis=1)
            positions = positions[:, -1:] + 1
            logits, cache = lm.run([[token]], mask, positions, cache)
    return {"tokens": tokens, "margins": margins(np.stack(steps))}


def mobius_forced(directory: Path, ids: list[int], forced: list[int], watch: list, threads: int):
    """A mobius build's logits along ``forced`` (one prefill), in ``greedy.mjs``'s teacher-forced
    form: per step its top 2 and the logits of the ``watch`` tokens."""
    from mobius.runtime.causal_lm import OnnxCausalLM

    lm = OnnxCausalLM(directory, threads=threads)
    sequence = np.asarray([ids + forced[:-1]], dtype=np.int64)
    positions = np.arange(sequence.shape[1], dtype=np.int64)[None]
    logits, _ = lm.run(sequence, np.ones_like(sequence), positions, lm.empty_cache(1))
    steps = logits[0, len(ids) - 1 :].astype(np.float64)
    return [
        {"top2": [[a, x], [b, y]], "watched": [[t, float(row[t])] for t in tokens]}
        for (a, b, x, y), row, tokens in zip(margins(steps), steps, watch, strict=True)
    ]


def hf_greedy(model, ids: list[int], new_tokens: int) -> dict:
    """HF ``generate``, greedy and never stopping early, with each step's margin."""
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=None,
        output_logits=True,
        return_dict_in_generate=True,
    )
    ids_t = torch.tensor([ids])
    saved, model.generation_config = model.generation_config, config  # not merged with the GGUF's
    try:
        with torch.no_grad():
            out = model.generate(input_ids=ids_t, attention_mask=torch.ones_like(ids_t))
    finally:
        model.generation_config = saved
    logits = torch.stack([step[0] for step in out.logits]).double().numpy()
    return {"tokens": out.sequences[0, len(ids) :].tolist(), "margins": margins(logits)}


def llamacpp_greedy(node: str, gguf: Path, prompts: list[dict], args) -> dict:
    request = {
        "model": str(gguf),
        "new_tokens": args.new_tokens,
        "threads": args.threads,
        "kv_cache_type": args.llamacpp_kv_cache.upper(),
        "prompts": prompts,
    }
    done = subprocess.run(
        [node, str(NODE_DIR / "greedy.mjs")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=NODE_DIR,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise Refusal(f"llama.cpp (node greedy.mjs) failed on {gguf.name}: {tail}")
    answer = json.loads(done.stdout)
    for result in answer["results"]:
        result["margins"] = [(a[0], b[0], a[1], b[1]) for a, b in result.pop("top2")]
    return answer


def compare(tokens: list[int], reference: list[int]) -> dict:
    """How many of ``tokens`` equal ``reference`` position by position, and the first that does not."""
    same = [a == b for a, b in zip(tokens, reference, strict=True)]
    first = next((i for i, s in enumerate(same) if not s), None)
    return {"equal": sum(same), "of": len(same), "first_divergence": first}


def at(margins_: list, step: int | None) -> dict | None:
    if step is None:
        return None
    top1, top2, first, second = margins_[step]
    return {"top1": top1, "top2": top2, "margin": round(first - second, 4)}


def teacher_forced(hf_margins: list, forced: list[dict]) -> dict:
    """Another runtime along HF's greedy continuation (``forced``: llama.cpp's or a mobius build's
    logits there), against HF's own logits: how often its top-1 is HF's, how far its logits (of
    HF's top-2 tokens) and its top-1 minus top-2 margin move."""
    logit_deltas, margin_deltas, flips = [], [], []
    for step, ((top1, top2, first, second), cpp) in enumerate(zip(hf_margins, forced, strict=True)):
        watched = dict((token, logit) for token, logit in cpp["watched"])
        logit_deltas += [abs(watched[top1] - first), abs(watched[top2] - second)]
        margin_deltas.append((watched[top1] - watched[top2]) - (first - second))
        if cpp["top2"][0][0] != top1:
            flips.append(
                {
                    "step": step,
                    "hf": {"top1": top1, "margin": round(first - second, 4)},
                    "other": {
                        "top1": cpp["top2"][0][0],
                        "margin_over_hf_top1": round(cpp["top2"][0][1] - watched[top1], 4),
                    },
                }
            )
    return {
        "top1_equal": len(forced) - len(flips),
        "of": len(forced),
        "max_abs_logit_delta": round(max(logit_deltas), 4),
        "max_abs_margin_delta": round(max(abs(d) for d in margin_deltas), 4),
        "mean_abs_margin_delta": round(float(np.mean(np.abs(margin_deltas))), 4),
        "top1_differs": flips,
    }


def build(gguf: Path, out: Path, flags: list[str], reuse: bool) -> dict:
    """``mobius build`` in a subprocess (skipped with ``reuse`` where ``out`` holds a build); the
    MatMulNBits accuracy levels the graph holds."""
    import onnx

    if not (reuse and (out / "mobius.json").is_file()):
        command = [sys.executable, "-m", "mobius", "build", "--model", str(gguf)]
        command += ["--output", str(out), "--overwrite", "-q", *flags]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise Refusal(f"mobius build {' '.join(flags)} failed: {done.stderr.strip()[-300:]}")
    graph = onnx.load(out / "model.onnx", load_external_data=False).graph
    levels = {
        attr.i
        for node in graph.node
        if node.op_type == "MatMulNBits"
        for attr in node.attribute
        if attr.name == "accuracy_level"
    }
    return {"flags": flags, "matmulnbits_accuracy_levels": sorted(levels)}


def run_model(name: str, gguf: Path, args, node: str, prompts: list[str]) -> dict:
    import torch
    from transformers import AutoTokenizer

    from mobius.testing.gguf import hf_from_gguf

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    inputs = [{"text": p, "ids": tokenizer(p)["input_ids"]} for p in prompts]
    print(f"{name}: HF ...", flush=True)
    torch.set_num_threads(args.threads)
    hf = hf_from_gguf(gguf, attn_implementation="eager").eval()
    hf_runs = [hf_greedy(hf, item["ids"], args.new_tokens) for item in inputs]
    del hf
    print(f"{name}: llama.cpp ...", flush=True)
    for item, ref in zip(inputs, hf_runs, strict=True):  # also llama.cpp along HF's tokens
        item["forced"] = ref["tokens"]
        item["watch"] = [[top1, top2] for top1, top2, _, _ in ref["margins"]]
    llama = llamacpp_greedy(node, gguf, inputs, args)
    builds, mobius_runs = {}, {}
    for variant in args.variants:
        print(f"{name}: mobius build ({variant}) ...", flush=True)
        out = args.work_dir / name / variant
        builds[variant] = build(gguf, out, VARIANTS[variant], args.reuse_builds)
        mobius_runs[variant] = []
        for item in inputs:
            run = mobius_greedy(out, item["ids"], args.new_tokens, args.threads)
            run["forced"] = mobius_forced(
                out, item["ids"], item["forced"], item["watch"], args.threads
            )
            mobius_runs[variant].append(run)
    rows = []
    for index, item in enumerate(inputs):
        cpp, ref = llama["results"][index], hf_runs[index]
        row = {
            "prompt": item["text"],
            "input_ids": item["ids"],
            "llamacpp_own_ids": cpp["own_ids"],
            "llamacpp_tokenization_equal": cpp["own_ids"] == item["ids"],
            "tokens": {"llamacpp": cpp["tokens"], "hf": ref["tokens"]},
            "text": {"llamacpp": tokenizer.decode(cpp["tokens"])},
            "hf_vs_llamacpp": compare(ref["tokens"], cpp["tokens"]),
            "mobius": {},
        }
        step = row["hf_vs_llamacpp"]["first_divergence"]
        row["hf_vs_llamacpp"]["margin_hf"] = at(ref["margins"], step)
        row["hf_vs_llamacpp"]["margin_llamacpp"] = at(cpp["margins"], step)
        if step is not None:
            row["text"]["hf"] = tokenizer.decode(ref["tokens"])
        for variant, runs in mobius_runs.items():
            run = runs[index]
            versus = compare(run["tokens"], cpp["tokens"])
            versus["margin_mobius"] = at(run["margins"], versus["first_divergence"])
            versus["margin_llamacpp"] = at(cpp["margins"], versus["first_divergence"])
            versus_hf = compare(run["tokens"], ref["tokens"])
            versus_hf["margin_mobius"] = at(run["margins"], versus_hf["first_divergence"])
            row["mobius"][variant] = {
                "vs_llamacpp": versus,
                "vs_hf": versus_hf,
                "teacher_forced_vs_hf": teacher_forced(ref["margins"], run["forced"]),
            }
            row["tokens"][f"mobius-{variant}"] = run["tokens"]
        # llama.cpp's smallest top-1 minus top-2 over all steps: how close its closest call was
        row["min_margin_llamacpp"] = round(min(m[2] - m[3] for m in cpp["margins"]), 4)
        row["teacher_forced_llamacpp_vs_hf"] = teacher_forced(ref["margins"], cpp["forced"])
        rows.append(row)
    return {"gguf": gguf.name, "builds": builds, "llama_cpp": llama["llama_cpp"], "prompts": rows}


def summary_line(name: str, row: dict) -> str:
    hf, forced = row["hf_vs_llamacpp"], row["teacher_forced_llamacpp_vs_hf"]
    equal = "=" if row["llamacpp_tokenization_equal"] else "!="
    parts = [f"{name:8s} {row['prompt'][:28]:28s} tokenization {equal}"]
    parts.append(f"hf {hf['equal']}/{hf['of']} (first {hf['first_divergence']})")
    for variant, result in row["mobius"].items():
        cpp, ref = result["vs_llamacpp"], result["vs_hf"]
        parts.append(
            f"{variant} {cpp['equal']}/{cpp['of']} (first {cpp['first_divergence']}), "
            f"vs hf {ref['equal']}/{ref['of']}"
        )
    parts.append(
        f"forced top-1 {forced['top1_equal']}/{forced['of']}, "
        f"|d margin| mean {forced['mean_abs_margin_delta']}"
    )
    return "  ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path("/tmp/mobius-llamacpp"),
        help="builds and the assembled Gemma3 GGUF (reused across runs)",
    )
    parser.add_argument(
        "--llamacpp-kv-cache",
        choices=["f16", "f32"],
        default="f16",
        help="llama.cpp's KV cache type (default f16, llama.cpp's own; f32 also turns off its "
        "flash attention)",
    )
    parser.add_argument(
        "--reuse-builds", action="store_true", help="keep builds already in --work-dir"
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        node = check_node()
        ggufs = gguf_files(args.work_dir, args.models)
        sys.path.insert(0, str(HERE.parent / "tests" / "mobius"))
        from real_weights_cases import PROMPTS

        report = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "new_tokens": args.new_tokens,
            "threads": args.threads,
            "models": {},
        }
        for name, gguf in ggufs.items():
            report["models"][name] = run_model(name, gguf, args, node, PROMPTS)
    except Refusal as error:
        print(f"mobius: error: {error}", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    partial = args.output.with_suffix(".json.partial")
    partial.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, args.output)
    for name, model in report["models"].items():
        print(f"{name}: llama.cpp {model['llama_cpp']['repo']} {model['llama_cpp']['release']}")
        for row in model["prompts"]:
            print(summary_line(name, row))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
