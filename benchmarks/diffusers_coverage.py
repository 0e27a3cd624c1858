"""Breadth sweep over diffusers model classes: each built from a small config with every
parameter random, converted with the CLI, and compared with PyTorch on onnxruntime.

For each entry of ``mobius.testing.diffusers_configs.ALL_CONFIGS``, in a fresh subprocess:
build and save the model, ``python -m mobius build``, then run every graph at a batch and
resolution other than the traced ones, at two such size sets (``SIZE_SETS``: a class passes only when
both match; atol 1e-4; VAE decoders 1e-3 relative). Statuses: pass,
mismatch, convert-error, build-error, timeout. Results go to
``benchmarks/results/diffusers_coverage.json`` and the "Diffusers" table of ``docs/coverage.md``.

    python benchmarks/diffusers_coverage.py                  # every class
    python benchmarks/diffusers_coverage.py --only AutoencoderKL DiTTransformer2DModel
    python benchmarks/diffusers_coverage.py --report         # rewrite the table only
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sweep_versions  # sibling module

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "diffusers_coverage.json"
COVERAGE = ROOT / "docs" / "coverage.md"
HEADING = "# Diffusers model classes"
from mobius.verification.diffusers_feeds import SIZE_SETS, feeds, torch_outputs  # noqa: E402


def run_one(label: str) -> dict:
    """Convert and compare one entry (runs in a subprocess)."""
    import diffusers
    import numpy as np
    import onnxruntime as ort
    import torch

    from mobius.diffusers.components import component_tasks
    from mobius.diffusers.config import architecture
    from mobius.diffusers.shared_modules import with_sibling_config
    from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled
    from mobius.testing.diffusers_siblings import with_saved_sibling
    from mobius.testing.diffusers_tiny import save_pretrained

    _, cls_name, kwargs = next(c for c in ALL_CONFIGS if c[0] == label)
    work = Path(tempfile.mkdtemp())
    try:
        model = getattr(diffusers, cls_name)(**kwargs)
        randomize_scaled(model, 0)
        save_pretrained(model.eval(), work / "model")  # tied parameters once
        model = with_saved_sibling(model, work / "model")  # a ControlNet on its transformer
    except Exception as exc:  # noqa: BLE001 - any failure of diffusers itself is the status
        return {"status": "build-error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    started, cpu_before = time.perf_counter(), _children_cpu()
    proc = subprocess.run(
        [sys.executable, "-m", "mobius", "build", "--model", str(work / "model"),
         "--output", str(work / "onnx"), "-q"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    seconds = round(time.perf_counter() - started, 1)
    cpu = round(_children_cpu() - cpu_before, 1)  # wall far above it: the machine was loaded
    if proc.returncode != 0:
        return {"status": "convert-error", "detail": proc.stderr.strip()[-300:], "seconds": seconds,
                "cpu_seconds": cpu}  # fmt: skip
    config = json.loads((work / "model" / "config.json").read_text())
    config = with_sibling_config(config, work / "model")
    arch = architecture(config)
    worst, graphs, fixed = 0.0, [], []
    for task in component_tasks(cls_name):
        if not task.supports(arch):  # a scale the bank does not hold: no graph
            continue
        folder = work / "onnx" / task.name
        folder = folder if folder.is_dir() else work / "onnx"
        session = ort.InferenceSession(str(folder / "model.onnx"))
        shapes = {i.name: i.shape for i in session.get_inputs()}
        fixed += sorted({
            f"{task.name}: {d} fixed to {g}"
            # a task made for fixed sizes (a tile grid) keeps its contract's named axes
            for spec in getattr(task, "contract", task).inputs(arch, None)
            if spec.name in shapes  # an optional input the graph does not read is dropped
            for d, g in zip(spec.dims, shapes[spec.name], strict=True)
            if isinstance(d, str) and isinstance(g, int)
        })  # fmt: skip
        for number, run_sizes in enumerate(SIZE_SETS, 1):
            inputs = feeds(task, arch, session, run_sizes=run_sizes)
            with torch.no_grad():
                expected = [t.numpy() for t in torch_outputs(task, model, inputs)]
            got = session.run(None, {k: v.numpy() for k, v in inputs.items()})
            where = f"{task.name} at size set {number}"
            for e, g in zip(expected, got, strict=True):
                if e.shape != g.shape:
                    return {"status": "mismatch", "detail": f"{where}: shape {g.shape} != {e.shape}",
                            "seconds": seconds, "cpu_seconds": cpu}  # fmt: skip
                if e.dtype == bool:  # a mask output: a flipped entry differs by 1
                    e, g = e.astype(np.int64), g.astype(np.int64)
                diff = float(np.abs(e - g).max())
                relative = task.name == "vae_decoder"
                limit = 1e-3 * max(1.0, float(np.abs(e).max())) if relative else 1e-4
                worst = max(worst, diff / limit * 1e-4)
                if diff > limit:
                    return {"status": "mismatch", "detail": f"{where}: max diff {diff:.2e}",
                            "seconds": seconds, "cpu_seconds": cpu}  # fmt: skip
        graphs.append(task.name)
    result = {"status": "pass", "max_abs_diff": worst, "graphs": graphs, "seconds": seconds,
              "cpu_seconds": cpu, "size_sets": len(SIZE_SETS)}  # fmt: skip
    return result | ({"detail": "; ".join(fixed)} if fixed else {})


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def class_counts(results: dict, size_sets: int = 1) -> tuple[int, int]:
    """(classes passing, classes swept): a class passes when every config of it passes, checked
    at ``size_sets`` size sets or more (results from before the second set have none recorded)."""
    from mobius.testing.diffusers_configs import ALL_CONFIGS

    by_class: dict[str, list[bool]] = {}
    for label, cls, _ in ALL_CONFIGS:
        if label in results:
            r = results[label]
            ok = r["status"] == "pass" and r.get("size_sets", 1) >= size_sets
            by_class.setdefault(cls, []).append(ok)
    passing = sum(all(statuses) for statuses in by_class.values())
    return passing, len(by_class)


def _status(r: dict) -> str:
    if r["status"] == "pass" and r.get("size_sets", 1) < len(SIZE_SETS):
        return "pass (first size set only: not re-run)"
    return r["status"]


def report(results: dict) -> str:
    import diffusers

    passed = sum(r["status"] == "pass" for r in results.values())
    classes_passed, classes = class_counts(results)
    both, _ = class_counts(results, len(SIZE_SETS))
    share = f"{100 * classes_passed / classes:.0f}%" if classes else "-"
    lines = [
        HEADING, "",
        "`python benchmarks/diffusers_coverage.py`: each class from a small config "
        "(`mobius/testing/diffusers_configs.py`, `diffusers_configs_more.py`, "
        "`diffusers_configs_any.py`, `diffusers_configs_audio.py`), every parameter "
        "random (weights scaled by 1/sqrt(fan-in) so activations stay of order one), converted "
        "with the CLI and run on onnxruntime at two size sets, each with a batch, resolution, "
        "text length (and frame count for video) other than the traced ones (batch 3, 16x8 "
        "latents, 6 tokens, 9 frames; batch 1, 32x48, 5 tokens, 13 frames; 1D latents 64 and 96 "
        "long; traced at batch 2, 24x40, 7 tokens, 5 frames, 40 long), against PyTorch (atol 1e-4; VAE decoders 1e-3 relative); "
        "a class passes when both match. A size the graph fixes (a static input dimension, "
        "with a warning at conversion) is fed as the graph's own and listed in the detail.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(sweep_versions.current().items()))
        + " (rows from earlier runs: `benchmarks/results/versions.json` records each run).", "",
        f"**{classes_passed} of the {classes} classes swept pass ({share}); {passed} of "
        f"{len(results)} configs; {both} classes checked and passing at both size sets; "
        f"{len(model_classes())} model classes (`ModelMixin` subclasses) exported by diffusers "
        f"{diffusers.__version__}.** Every class outside the sweep is listed below with the "
        "reason it is not swept.", "",
        "| class | status | graphs | max diff (scaled to 1e-4) | convert s (CPU s) | detail |",
        "| --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for label, r in results.items():
        diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else ""
        detail = (r.get("detail") or "").replace("|", "/").replace("\n", " ")
        cpu = f" ({r['cpu_seconds']})" if "cpu_seconds" in r else ""
        lines.append(
            f"| {label} | {_status(r)} | {', '.join(r.get('graphs', []))} | {diff} | "
            f"{r.get('seconds', '')}{cpu} | {detail} |"
        )
    from diffusers_unswept import NOTES  # beside this script

    lines += ["", *(f"- {note}" for note in NOTES), "", *unswept(results)]
    return "\n".join(lines) + "\n"


def unswept(results: dict) -> list[str]:
    """Every other model class diffusers exports, with why it is not swept: a reason recorded
    when it was looked at (``diffusers_unswept.py``), else no contract (the argument none
    fills), else a contract and no small config written yet."""
    from diffusers_unswept import reason  # beside this script

    from mobius.diffusers.components import component_tasks
    from mobius.testing.diffusers_configs import ALL_CONFIGS

    swept = {c[1] for c in ALL_CONFIGS if c[0] in results}
    written = {c[1] for c in ALL_CONFIGS} - swept
    rows = []
    for name in model_classes():
        if name in swept:
            continue
        if name in written:
            rows.append(f"| {name} | a small config is written; not run in this sweep (time) |")
            continue
        try:
            graphs = ", ".join(t.name for t in component_tasks(name))
            rows.append(f"| {name} | contract ({graphs}); "
                        f"{reason(name) or 'no small config written yet'} |")  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the reason is the report
            named = re.search(r"input '(\w+)'", str(exc))
            why = (
                f"its forward requires '{named.group(1)}', whose shape no config key gives"
                if named
                else str(exc).split(": ", 1)[-1]
            )
            rows.append(f"| {name} | no contract: {reason(name) or why[:140]} |")
    return [
        f"Model classes outside the sweep ({len(rows)}), and why:", "",
        "| class | status |", "| --- | --- |", *rows,
    ]  # fmt: skip


def model_classes() -> list[str]:
    """Every ``ModelMixin`` subclass diffusers exports, by name."""
    import diffusers

    found = []
    for name in sorted(dir(diffusers)):
        try:
            cls = getattr(diffusers, name)
        except Exception:  # noqa: BLE001 - an optional backend missing: not a model class
            continue
        if isinstance(cls, type) and issubclass(cls, diffusers.ModelMixin):
            found.append(name)
    return [n for n in found if n != "ModelMixin"]


def write_report(results: dict) -> None:
    text = COVERAGE.read_text(encoding="utf-8") if COVERAGE.is_file() else ""
    if HEADING in text:
        head, _, rest = text.partition(HEADING)
        tail = rest.split("\n# ", 1)
        text = head + report(results) + (("\n# " + tail[1]) if len(tail) > 1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + report(results)
    COVERAGE.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--report", action="store_true")
    parser.add_argument(
        "--merge",
        nargs="*",
        type=Path,
        default=[],
        help="workers' results files to merge into the results",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the subprocess's entry
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="the results file (one per worker when sweeping in parallel)",
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one)))
        return
    from mobius.testing.diffusers_configs import ALL_CONFIGS

    results = json.loads(args.results.read_text()) if args.results.is_file() else {}
    for part in args.merge:
        results.update(json.loads(part.read_text()))
    if args.merge:
        args.results.write_text(json.dumps(results, indent=2))
    if not args.report:
        sweep_versions.record("diffusers", bool(args.only))
        for label, _, _ in ALL_CONFIGS:
            if args.only and label not in args.only:
                continue
            try:
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", label], capture_output=True, text=True,
                    timeout=args.timeout, cwd=ROOT,
                )  # fmt: skip
                lines = proc.stdout.strip().splitlines()
                result = (
                    json.loads(lines[-1])
                    if proc.returncode == 0 and lines
                    else {"status": "convert-error", "detail": proc.stderr.strip()[-300:]}
                )
            except subprocess.TimeoutExpired:
                result = {"status": "timeout"}
            results[label] = result
            print(label, result["status"], result.get("detail", ""), flush=True)
            args.results.parent.mkdir(parents=True, exist_ok=True)
            args.results.write_text(json.dumps(results, indent=2))
    if args.results != RESULTS:
        return  # a worker: the table is written from the merged results
    order = [c[0] for c in ALL_CONFIGS]
    write_report({k: results[k] for k in order if k in results})


if __name__ == "__main__":
    main()
