"""Probe the head tasks across model types: tiny random model, build, parity by contract names.

    python benchmarks/task_coverage.py fill-mask image-classification [--types bert,vit]

For each task, every model type in the task's auto mapping (or ``--types``): a tiny config
(``mobius.testing.configs.tiny_config_for``), the head's model with every parameter randomised,
``mobius.build``, then ``contract_diffs`` (batch 2, padded) at atol 1e-4. One line per pair:
``pass``, ``mismatch`` (with the diff), ``hf`` (transformers cannot build the tiny model, or,
when mobius failed, its own forward fails on the contract's inputs: not a mobius failure) or ``fail`` (the first line of mobius' error). A pair gets ``--timeout``
seconds.

Each result is merged into ``benchmarks/results/task_coverage.json`` (``--json F`` for another
file) as it is made, with the code revision it was measured on: the latest result per (task,
type), except that a time-out never replaces a result (the machine's load decides it, not the
code). That file is committed; ``task_coverage_report.py`` (docs/coverage.md's tables) and
``support_table.py`` (``mobius list`` / ``info``) read it.

``--log F`` appends each result line to F as it is made (with the code revision once, at the start),
and ``--skip F`` (repeatable) leaves out pairs that already have a line in F: a stopped run resumes
with ``--log F --skip F``, and ``--only-failed F`` re-runs just the pairs whose latest line in F is
not ``pass`` (after a fix).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import sweep_versions  # sibling module

ATOL = 1e-4
RESULTS = Path(__file__).resolve().parent / "results" / "task_coverage.json"


class Timeout(BaseException):  # not caught by a probe's `except Exception`
    pass


def _first_line(exc: BaseException, width: int) -> str:
    return (str(exc).splitlines() or [""])[0][:width]


def _alarm(signum, frame):
    raise Timeout


SIZES = {"batch": 2, "num_choices": 3, "num_samples": 4003, "num_frames": 67}


def hf_failure(model, task, config) -> str | None:
    """Why transformers' own forward fails on the contract's inputs (None if it runs): such a
    pair is transformers' limit, not mobius', and counts as not buildable."""
    import torch

    from mobius.sources.config import from_hf

    feeds = {}
    for spec in task.inputs(from_hf(config), model):
        shape = [d if isinstance(d, int) else SIZES.get(d, 7) for d in spec.dims]
        if spec.dtype == torch.int64:
            feeds[spec.name] = torch.ones(shape, dtype=torch.int64)
            if spec.name == "input_ids":
                feeds[spec.name] = torch.randint(3, 50, shape)
        else:
            feeds[spec.name] = torch.randn(shape)
    try:
        with torch.no_grad():
            task.call(model, feeds)
    except Exception as exc:  # noqa: BLE001
        return f"transformers' own forward fails: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
    return None


def probe(task_name: str, model_type: str, root: Path, fan_in: bool = False) -> dict:
    import torch

    import mobius
    from mobius.sources.config import from_hf
    from mobius.tasks import TASKS
    from mobius.testing.configs import tiny_config_for
    from mobius.testing.parity import contract_diffs
    from mobius.testing.tiny import randomize

    task = TASKS[task_name]
    try:
        config = tiny_config_for(model_type)
        torch.manual_seed(0)
        model = task.auto_class(from_hf(config)).from_config(config, attn_implementation="eager")
        randomize(model.eval(), fan_in=fan_in)
        directory = root / f"{task_name}-{model_type}"
        model.save_pretrained(directory)
    except Exception as exc:  # noqa: BLE001 - recorded, per pair
        return {
            "status": "hf",
            "reason": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}",
        }
    try:
        out = mobius.build(directory, task=task_name).save(root / f"{directory.name}-onnx")
    except Exception as exc:  # noqa: BLE001
        hf = hf_failure(model, task, config)
        if hf is not None:
            return {"status": "hf", "reason": hf}
        return {
            "status": "fail",
            "reason": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}",
        }
    try:
        diffs = contract_diffs(model, out, config)
    except Exception as exc:  # noqa: BLE001 - HF's own forward on the parity inputs, or onnxruntime
        return {"status": "fail", "reason": f"parity run: {type(exc).__name__}: {str(exc)[:200]}"}
    worst = max(diffs.values())
    return {"status": "pass" if worst <= ATOL else "mismatch", "max_diff": worst}


HEAD_MAPPINGS = (
    "MODEL_FOR_MASKED_LM",
    "MODEL_FOR_MULTIPLE_CHOICE",
    "MODEL_FOR_IMAGE_CLASSIFICATION",
    "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION",
    "MODEL_FOR_CTC",
    "MODEL_FOR_AUDIO_CLASSIFICATION",
)


def head_types(modeling_auto) -> set[str]:
    """The text, vision and audio types probed for a head task (issue 13: their AutoModel is
    feature extraction): the head mappings' types, but of text/token classification and QA
    only the encoders (``not_encoders``)."""
    types: set[str] = set()
    for mapping in HEAD_MAPPINGS:
        types |= set(getattr(modeling_auto, f"{mapping}_MAPPING_NAMES"))
    for mapping in ("SEQUENCE_CLASSIFICATION", "TOKEN_CLASSIFICATION", "QUESTION_ANSWERING"):
        names = getattr(modeling_auto, f"MODEL_FOR_{mapping}_MAPPING_NAMES")
        types |= set(names) - not_encoders(modeling_auto)
    return types


# tasks whose mappings also list the causal LMs' own heads (LlamaForSequenceClassification, ...)
DECODER_HEADS = ("text-classification", "token-classification", "question-answering")


def not_encoders(modeling_auto) -> set[str]:
    """Causal-LM types that are neither masked LMs nor encoder-decoders (BERT and BART have a
    causal-LM entry too, and stay in)."""
    causal = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    keep = set(modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES) | set(
        modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    )
    return causal - keep


def pairs(tasks: list[str]) -> dict[str, set[str]]:
    """The model types probed for each task: the task's auto mapping; feature extraction
    (``AutoModel``) only for the types of the head mappings, text/token classification and QA
    only for encoders."""
    from transformers.models.auto import modeling_auto

    from mobius.tasks import TASKS

    chosen = {}
    for name in tasks:
        names = set(getattr(modeling_auto, f"{TASKS[name].mapping}_MAPPING_NAMES"))
        if name == "feature-extraction":
            names &= head_types(modeling_auto)
        elif name in DECODER_HEADS:  # not the causal LMs' heads: issue 13 is about encoders
            names -= not_encoders(modeling_auto)
        chosen[name] = names
    return chosen


def logged(paths: list[str]) -> dict[tuple[str, str], dict]:
    """The latest result per (task, type) in result logs (lines ``task type {json}``)."""
    found: dict[tuple[str, str], dict] = {}
    for path in paths:
        if not Path(path).exists():
            continue
        for line in Path(path).read_text().splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[2].startswith("{"):
                found[(parts[0], parts[1])] = json.loads(parts[2])
    return found


def timed_out(row: dict) -> bool:
    return row["status"] == "fail" and row.get("reason", "").startswith("over ")


def merge(results: dict[str, dict[str, dict]], task: str, model_type: str, row: dict) -> None:
    """Put ``row`` in ``results`` (task -> type -> row): a later result wins, but a time-out never
    replaces an earlier result (a time limit hit under load says nothing new about the code)."""
    earlier = results.setdefault(task, {}).get(model_type)
    if earlier is not None and timed_out(row) and not timed_out(earlier):
        return
    results[task][model_type] = row


def load(path: Path = RESULTS) -> dict[str, dict[str, dict]]:
    """The merged results (task -> type -> row with its ``revision``); empty if none yet."""
    return json.loads(path.read_text()) if path.is_file() else {}


def save(results: dict[str, dict[str, dict]], path: Path = RESULTS) -> None:
    """Write ``results`` to ``path`` whole (a temporary file replaced), tasks and types sorted."""
    ordered = {task: dict(sorted(rows.items())) for task, rows in sorted(results.items())}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ordered, indent=1) + "\n")
    tmp.replace(path)


def record(path: Path, task: str, model_type: str, row: dict) -> None:
    """Merge one result into the file at ``path`` (read again first: two sweeps may share it)."""
    results = load(path)
    merge(results, task, model_type, row)
    save(results, path)


def revision() -> str:
    """The git revision of the code under test (``+dirty`` when the tree differs from it)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return (root / "REVISION").read_text().strip() if (root / "REVISION").exists() else "?"
    return head + ("+dirty" if dirty else "")


def main(argv: list[str]) -> int:
    import logging
    import warnings

    from mobius.tasks import TASKS

    parser = argparse.ArgumentParser()
    parser.add_argument(
        "tasks", nargs="+", choices=[*TASKS, "all"], help="tasks to probe; all: every task"
    )
    parser.add_argument("--types", help="comma-separated model types (default: the whole mapping)")
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument(
        "--json",
        type=Path,
        default=RESULTS,
        help="merge each result into this file (default: benchmarks/results/task_coverage.json)",
    )
    parser.add_argument("--log", help="append each result line here as it is made")
    parser.add_argument(
        "--fan-in-init",
        action="store_true",
        help="random weights at 1/sqrt(fan-in) (randomize(fan_in=True)) instead of 0.3",
    )
    parser.add_argument("--skip", action="append", default=[], help="skip pairs logged here")
    parser.add_argument(
        "--only-failed",
        action="append",
        default=[],
        help="run only the pairs whose latest line here is not a pass",
    )
    args = parser.parse_args(argv)
    if "all" in args.tasks:
        args.tasks = [name for name, task in TASKS.items() if type(task).__name__ == "HeadTask"]
    done = logged(args.skip)
    failed = {k for k, v in logged(args.only_failed).items() if v.get("status") != "pass"}
    log = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115 - whole run
    measured_on = revision()
    if log is not None:
        log.write(
            f"# revision {measured_on} started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
            + (" init fan-in" if args.fan_in_init else "")
            + "\n"
        )
    measured_on += " fan-in" if args.fan_in_init else ""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    signal.signal(signal.SIGALRM, _alarm)
    sweep_versions.record("tasks", partial=True)
    chosen = pairs(args.tasks)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks:
            types = args.types.split(",") if args.types else sorted(chosen[name])
            for model_type in types:
                if (name, model_type) in done or (
                    args.only_failed and (name, model_type) not in failed
                ):
                    continue
                started = time.perf_counter()
                signal.alarm(args.timeout)
                try:
                    result = probe(name, model_type, Path(tmp), fan_in=args.fan_in_init)
                except Timeout:
                    result = {"status": "fail", "reason": f"over {args.timeout} s"}
                finally:
                    signal.alarm(0)
                result["seconds"] = round(time.perf_counter() - started, 1)
                record(args.json, name, model_type, {**result, "revision": measured_on})
                line = f"{name} {model_type} {json.dumps(result)}"
                print(line, flush=True)
                if log is not None:
                    log.write(line + "\n")
                shutil.rmtree(Path(tmp) / f"{name}-{model_type}", ignore_errors=True)
                shutil.rmtree(Path(tmp) / f"{name}-{model_type}-onnx", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
