"""Audit: the guards relating two or more input sizes that each diffusers sweep config's trace
holds for and its contract does not declare (``mobius.diffusers.shape_relations``).

Each config of ``mobius.testing.diffusers_configs.ALL_CONFIGS`` is traced as the conversion traces
it (``components.prepare_graph``: meta device, no weights, the retrace with fixed axes where the
dynamic trace is refused); every call of ``undeclared_relations`` is recorded, so a relation the
trace now checks in the graph shows here with the size set where it fails. Configs run in one
worker process (restarted past a crash or a config over ``--timeout`` seconds). Results go to
``benchmarks/results/diffusers_shape_relations.json``.

    python benchmarks/diffusers_shape_relations.py                    # every config
    python benchmarks/diffusers_shape_relations.py --only AutoencoderKL
    python benchmarks/diffusers_shape_relations.py --missing          # resume a cut-off run
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "diffusers_shape_relations.json"


def config_of(cls_name: str, kwargs: dict, folder: Path) -> dict:
    """The ``config.json`` the class saves for ``kwargs`` (built with empty weights), written to
    ``folder``; a sibling's beside it where the class runs on one."""
    import diffusers
    from accelerate import init_empty_weights

    from mobius.diffusers.shared_modules import SHARES, with_sibling_config
    from mobius.testing.diffusers_configs import ALL_CONFIGS
    from mobius.testing.diffusers_configs_lists import SIBLINGS

    def save(name: str, values: dict, where: Path) -> dict:
        with init_empty_weights():
            model = getattr(diffusers, name)(**values)
        config = json.loads(json.dumps({**dict(model.config), "_class_name": name}, default=list))
        where.mkdir(parents=True, exist_ok=True)
        (where / "config.json").write_text(json.dumps(config))
        return config

    config = save(cls_name, kwargs, folder)
    if cls_name in SIBLINGS:
        _, other, values = next(c for c in ALL_CONFIGS if c[0] == SIBLINGS[cls_name])
        save(other, values, folder.parent / SHARES[cls_name][0])
        config = with_sibling_config(config, folder)
    return config


def audit_one(label: str) -> dict:
    """The relations each graph of ``label``'s config holds for, and how its trace ends."""
    import torch

    import mobius.diffusers.trace as trace
    from mobius.diffusers.components import component_tasks, prepare_graph
    from mobius.diffusers.config import architecture
    from mobius.diffusers.shape_relations import relations
    from mobius.sources.resolve import Source
    from mobius.testing.diffusers_configs import ALL_CONFIGS

    _, cls_name, kwargs = next(c for c in ALL_CONFIGS if c[0] == label)
    folder = Path(tempfile.mkdtemp()) / "model"
    config = config_of(cls_name, kwargs, folder)
    arch = architecture(config)
    original = trace.undeclared_relations
    graphs = {}
    for task in component_tasks(cls_name):
        if not task.supports(arch):  # a bank's entry the config does not hold: no graph
            continue
        seen: dict[str, dict] = {}
        counts = {"multi_axis_guards": 0}

        def recorder(program, specs, cfg, *args, _seen=seen, _counts=counts):
            found = original(program, specs, cfg, *args)
            fixed = sorted({d for s in specs for d in s.dims if isinstance(d, int)} - {1})
            multi = sum(len(e.free_symbols) >= 2 for e, _ in relations(program, specs))
            _counts["multi_axis_guards"] = max(_counts["multi_axis_guards"], multi)
            for r in found:
                _seen.setdefault(
                    r.text,
                    {"example": r.example, "where": r.where, "static_dims": str(fixed)},
                )
            return found

        trace.undeclared_relations = recorder
        started = time.perf_counter()
        try:
            prepared = prepare_graph(Source(folder, config), arch, task, torch.float32)
            outcome = {
                "status": "traced",
                "guards": [str(b) for b in prepared.traced.length_bounds],
            }
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            outcome = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"[:400]}
        finally:
            trace.undeclared_relations = original
        graphs[task.name] = {
            **outcome,
            "undeclared": seen,
            **counts,
            "seconds": round(time.perf_counter() - started, 1),
        }
    flagged = any(g["undeclared"] for g in graphs.values())
    return {"class": cls_name, "undeclared": flagged, "graphs": graphs}


def worker(labels: list[str], timeout: int) -> None:
    """Audit ``labels`` in turn, one JSON line each on stdout (a config over ``timeout``
    seconds is cut off by an alarm)."""

    def alarm(*_):
        raise TimeoutError(f"over {timeout} s")

    signal.signal(signal.SIGALRM, alarm)
    for label in labels:
        signal.alarm(timeout)
        try:
            result = audit_one(label)
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            result = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"[:400]}
        finally:
            signal.alarm(0)
        print(json.dumps({"label": label, "result": result}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--timeout", type=int, default=240, help="seconds per config")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--missing", action="store_true", help="only configs the results lack")
    parser.add_argument("--worker", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.timeout)
        return
    from mobius.testing.diffusers_configs import ALL_CONFIGS

    results = json.loads(args.results.read_text()) if args.results.is_file() else {}
    todo = [c[0] for c in ALL_CONFIGS if not args.only or c[0] in args.only]
    todo = [label for label in todo if not (args.missing and label in results)]
    while todo:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--timeout", str(args.timeout), "--worker", *todo],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        for line in proc.stdout:
            if not line.startswith('{"label"'):
                continue
            entry = json.loads(line)
            results[entry["label"]] = entry["result"]
            todo.remove(entry["label"])
            print(entry["label"], _summary(entry["result"]), flush=True)
            args.results.parent.mkdir(parents=True, exist_ok=True)
            args.results.write_text(json.dumps(results, indent=2))
        proc.wait()
        if todo and proc.returncode != 0:  # the worker died on todo[0]
            results[todo[0]] = {"status": "error", "detail": f"worker exit {proc.returncode}"}
            todo.pop(0)
            args.results.write_text(json.dumps(results, indent=2))


def _summary(result: dict) -> str:
    if "graphs" not in result:
        return result.get("detail", "")
    return "; ".join(
        f"{name}: {g['status']} {list(g['undeclared'])}" for name, g in result["graphs"].items()
    )


if __name__ == "__main__":
    main()
