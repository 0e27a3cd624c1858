"""Breadth sweep: every causal-LM model type in transformers, converted with the CLI, parity-checked.

For each type in ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, in a fresh subprocess with a timeout:

1. build the tiny HF model (``mobius.testing.configs.tiny_config_for``) with eager attention,
   randomise every parameter and ``save_pretrained`` it;
2. convert it with ``python -m mobius build --model DIR --output OUT -q``;
3. compare with PyTorch (atol 1e-4, batch 2, left padding): with a KV cache, a prefill of 6
   tokens then a decode step of 3 tokens on the returned cache against the full forward; without
   one, the logits of all 9 (``max_abs_diff``). This sets the status. Then the same for a long
   prompt, reported next to it: a prefill of 70 and a step of 10 (shorter where the model's
   position table is: reformer's holds 32).
4. with a cache and a ``genai_config.json``: 8 greedy tokens through onnxruntime-genai, against
   the same through plain onnxruntime (the genai column).

Statuses: pass, pass-no-cache, mismatch, blocked (ops without a lowering, from ``mobius explain``),
convert-error, hf-build-error, timeout. Results go to ``benchmarks/results/coverage.json`` (merged
by type, so ``--only`` re-runs update it) and ``docs/coverage.md``.

    nice -n 10 python benchmarks/coverage.py                 # the full sweep (~1 h on 2 cores)
    python benchmarks/coverage.py --only llama mamba         # some types; merged into the results
    python benchmarks/coverage.py --report                   # rewrite docs/coverage.md only
    nice python benchmarks/coverage.py --genai-only --only llama qwen2   # the genai column only

``--genai-only`` builds and converts as above but skips the parity checks: only the genai column
(and ``genai_s``, its seconds) of each type's record is replaced; status, diffs and the rest stay
those of the last full run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import sweep_versions  # sibling module
from coverage_report import (  # sibling module
    ATOL,
    LENGTH,
    LONG_LENGTH,
    LONG_PREFILL,
    PREFILL,
    STATUSES,
    detail,
    fmt_diff,
    write_report,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "coverage.json"
CLI_TIMEOUT = 400
GENAI_TOKENS = 8  # greedy tokens compared between onnxruntime-genai and onnxruntime


# ------------------------------------------------------------------------------------------ worker


def _one_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line[:limit]


def _exception_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}"[:300]


def _innermost_frame(tb_text: str, prefer: str = "") -> str:
    """The last ``File "...", line N, in f`` of a traceback, preferring frames under ``prefer``."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb_text)
    if prefer:
        ours = [f for f in frames if prefer in f[0]]
        frames = ours or frames
    if not frames:
        return ""
    path, line, func = frames[-1]
    for anchor in ("site-packages/", str(ROOT) + "/"):
        if anchor in path:
            path = path.split(anchor, 1)[1]
    return f"{path}:{line} in {func}"


def _explain(directory: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "mobius", "explain", "--model", str(directory), "--json", "-"]
        + ["--task", "text-generation"],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"exit_code": proc.returncode, "error": _one_line(proc.stderr)}
    return {"exit_code": proc.returncode, **_summarise_explain(report)}


def _blocked_ops(message: str) -> list[str] | None:
    """The ops in the CLI's "no lowering for: OP (in MODULES); OP (in ...)" message."""
    if "no lowering for" not in message:
        return None
    body = message.split("no lowering for", 1)[1].lstrip(": ")
    ops = re.findall(r"(?:^|; )([\w.:]+) \(in ", body)
    return sorted(set(ops)) or None


def _summarise_explain(report: dict) -> dict:
    summary = report.get("summary", {})
    return {
        "verdict": summary.get("verdict"),
        "unsupported_ops": sorted(summary.get("unsupported_ops", {})),
        "gaps": [
            {
                "kind": g.get("kind"),
                "subject": g.get("subject"),
                "modules": g.get("modules", [])[:3],
                "next_step": g.get("next_step", "")[:1200],
            }
            for g in summary.get("gaps", [])
        ],
    }


def _package_explain(out_dir: Path) -> dict:
    path = out_dir / "explain.json"
    return _summarise_explain(json.loads(path.read_text())) if path.exists() else {}


def _logits(out):
    return (out.logits if hasattr(out, "logits") else out[0]).float().numpy()


def _longest(config) -> int:
    """The long check's length: LONG_LENGTH, or the model's position table if that is shorter."""
    from mobius.sources.config import position_limit

    positions = position_limit(config)
    return LONG_LENGTH if positions is None else min(LONG_LENGTH, positions)


def _parity(model, out_dir: Path, config) -> dict:
    """The short check (which sets the status, as issue 7 defines it), then the long one, reported
    next to it (``long``)."""
    from mobius.testing.parity import causal_lm_parity

    short = causal_lm_parity(model, out_dir, config, prefill=PREFILL, length=LENGTH)
    length = _longest(config)
    prefill = max(1, length - (LONG_LENGTH - LONG_PREFILL))
    long = causal_lm_parity(model, out_dir, config, prefill=prefill, length=length)
    long = {"length": length, "prefill": prefill, **long}
    return {**short, "long": long}


def _genai(out_dir: Path, config) -> str:
    """The genai column: onnxruntime-genai's greedy tokens against plain onnxruntime's (which
    the parity check ties to PyTorch), from the output directory alone."""
    if not (out_dir / "genai_config.json").is_file():
        return "no config"
    try:
        from mobius.runtime.causal_lm import OnnxCausalLM
        from mobius.runtime.generate import genai_tokens, stop_tokens

        vocab = config.get_text_config().vocab_size
        ids = [(7 * i + 3) % vocab for i in range(LENGTH)]
        # where the config names no end-of-sequence id (tiny configs), genai stops at the pad id
        genai_config = json.loads((out_dir / "genai_config.json").read_text())
        stop = stop_tokens(out_dir) or {genai_config["model"].get("pad_token_id", 0)}
        expected = list(OnnxCausalLM(out_dir).stream(ids, GENAI_TOKENS, stop))
        actual = list(genai_tokens(out_dir, ids, GENAI_TOKENS))
    except Exception as exc:
        return "error: " + _exception_line(exc)
    if actual == expected:
        return "same"
    step = next((i for i, (a, b) in enumerate(zip(actual, expected, strict=False)) if a != b), None)
    return f"differs at token {min(len(actual), len(expected)) if step is None else step}"


def _hf_model(model_type: str):
    from mobius.testing.causal_lm import tiny_causal_lm

    return tiny_causal_lm(model_type)


def work(model_type: str, genai_only: bool = False) -> dict:
    """Everything for one model type, in this process; returns the result record (with
    ``genai_only``: the conversion and the genai check, no parity)."""
    import warnings

    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    import torch

    from mobius.testing.parity import decoder_inputs, hf_feeds

    result: dict = {"type": model_type}
    with tempfile.TemporaryDirectory(prefix=f"coverage-{model_type}-") as tmp:
        hf_dir, out_dir = Path(tmp) / "hf", Path(tmp) / "onnx"
        # 1. the HF model: built, run once (so that a model HF cannot run is not blamed on us)
        try:
            model, config = _hf_model(model_type)
            result["parameters"] = sum(p.numel() for p in model.parameters())
            feeds = decoder_inputs(config.get_text_config().vocab_size, length=LENGTH)
            with torch.no_grad():
                _logits(model(**hf_feeds(model, feeds)))
            model.save_pretrained(hf_dir)
        except Exception as exc:
            result.update(
                status="hf-build-error",
                error=_exception_line(exc),
                where=_innermost_frame(traceback.format_exc(), "transformers/"),
            )
            return result
        # 2. convert with the CLI
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mobius",
                    "build",
                    "--model",
                    str(hf_dir),
                    "--task",
                    "text-generation",
                ]
                + ["--output", str(out_dir), "-q"],
                capture_output=True,
                text=True,
                timeout=CLI_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            result.update(status="timeout", error=f"mobius build ran past {CLI_TIMEOUT} s")
            return result
        result["convert_s"] = round(time.perf_counter() - started, 1)
        result["cli_exit"] = proc.returncode
        if proc.returncode != 0:
            result["error"] = _one_line(proc.stderr)
            result["where"] = _innermost_frame(proc.stderr, "/mobius/") or _innermost_frame(
                proc.stderr
            )
            ops = _blocked_ops(result["error"])
            if ops is None and proc.returncode == 2 and "lowering" in result["error"]:
                ops = _explain(hf_dir).get("unsupported_ops")  # the CLI's message was cut short
            if ops:
                result["status"] = "blocked"
                result["ops"] = ops
            else:
                result["status"] = "convert-error"
            return result
        if genai_only:
            kv_cache = json.loads((out_dir / "mobius.json").read_text()).get("kv_cache")
            result["genai"] = _genai(out_dir, config) if kv_cache else "no cache"
            result["status"] = "genai-only"
            return result
        # 3. parity
        try:
            parity = _parity(model, out_dir, config)
        except Exception as exc:
            result.update(
                status="convert-error",
                error="parity run: " + _exception_line(exc),
                where=_innermost_frame(traceback.format_exc()),
            )
            return result
        result.update(parity)
        if parity["cache"]:
            result["genai"] = _genai(out_dir, config)
        if parity["max_diff"] <= ATOL:
            result["status"] = "pass" if parity["cache"] else "pass-no-cache"
        else:
            result["status"] = "mismatch"
        if not parity["cache"]:
            result["explain"] = _package_explain(out_dir)  # why no cache: the gaps
    return result


def _worker_main(model_type: str, out_path: Path, genai_only: bool) -> None:
    try:
        result = work(model_type, genai_only)
    except Exception as exc:  # a bug in this script: still a record
        result = {"type": model_type, "status": "convert-error", "error": _exception_line(exc)}
    out_path.write_text(json.dumps(result))


# ------------------------------------------------------------------------------------------ driver


def run_one(model_type: str, timeout: float, genai_only: bool = False) -> dict:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="coverage-result-") as tmp:
        out_path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", model_type, str(out_path)]
        cmd += ["--genai-only"] if genai_only else []
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and the CLI under it
            proc.communicate()
            result = {"type": model_type, "status": "timeout", "error": f"over {timeout:.0f} s"}
        else:
            if out_path.exists():
                result = json.loads(out_path.read_text())
            else:
                result = {
                    "type": model_type,
                    "status": "convert-error",
                    "error": f"worker died (exit {proc.returncode}): {_one_line(output)}",
                }
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _load() -> dict:
    if RESULTS.exists():
        return json.loads(RESULTS.read_text())
    return {"meta": {}, "results": {}}


def _save(data: dict, mine: dict) -> dict:
    """Merge this run's results into the file as it is now (another run may have written it)."""
    current = _load()
    current["meta"] = data["meta"]
    current["results"].update(mine)
    current["results"] = dict(sorted(current["results"].items()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(current, indent=1) + "\n")
    tmp.replace(RESULTS)
    return current


# ---------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="TYPE", help="just these model types")
    parser.add_argument("--jobs", type=int, default=1, help="types run at the same time")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per type")
    parser.add_argument("--report", action="store_true", help="only rewrite docs/coverage.md")
    parser.add_argument(
        "--genai-only",
        action="store_true",
        help="convert and run only the genai check; replaces just the genai column of each type",
    )
    parser.add_argument("--worker", nargs=2, metavar=("TYPE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker_main(args.worker[0], Path(args.worker[1]), args.genai_only)
        return 0
    data = _load()
    if args.report:
        write_report(data)
        return 0
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    all_types = list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    types = args.only or all_types
    unknown = [t for t in types if t not in all_types]
    if unknown:
        parser.error(f"not causal-LM model types: {', '.join(unknown)}")
    if args.genai_only:
        return _genai_only(data, types, args)
    versions = sweep_versions.record("causal", partial=bool(args.only))
    data["meta"] = {
        **versions,
        "types_total": len(all_types),
        "atol": ATOL,
    }

    def one(model_type: str) -> dict:
        result = run_one(model_type, args.timeout)
        print(
            f"{model_type:28s} {result['status']:15s} {fmt_diff(result):>8s} "
            f"{result['seconds']:6.1f}s  {detail(result)[:140]}",
            flush=True,
        )
        return result

    mine: dict = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for result in pool.map(one, types):
            mine[result["type"]] = result
            data = _save(data, mine)  # after every type, so a partial sweep still has its results
            write_report(data)
    counts = {s: sum(r["status"] == s for r in data["results"].values()) for s in STATUSES}
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    return 0


def _genai_only(data: dict, types: list[str], args) -> int:
    """Re-run the genai column of ``types``; every other field of their records is kept."""
    for model_type in types:
        result = run_one(model_type, args.timeout, genai_only=True)
        genai = result.get("genai") or f"{result['status']}: {result.get('error', '')}"[:200]
        print(f"{model_type:28s} {result['seconds']:6.1f}s  genai: {genai}", flush=True)
        current = _load()
        record = current["results"].get(model_type, {"type": model_type})
        if genai == "no cache":
            record.pop("genai", None)
        else:
            record["genai"] = genai
            record["genai_s"] = result["seconds"]
            record["genai_date"] = datetime.date.today().isoformat()
        current["results"][model_type] = record
        data = _save(current, {model_type: record})
        write_report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
