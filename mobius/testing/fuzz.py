"""Fuzzing the CLI: mutated tiny checkpoints must convert with parity or be refused in one line.

A case is a base checkpoint (a tiny random model), edits to its ``config.json`` and edits to its
``model.safetensors`` header, written as plain tuples so that hypothesis prints a reproducer.
``run_case`` runs ``mobius build`` in-process on the mutated copy under a time bound and classifies
the outcome: ``converted`` (exit 0, ``model.onnx`` written, parity with the HF model loaded from
the same mutated checkpoint), ``refused`` (exit 2, exactly one ``mobius: error:`` line, no output
and no temporary files) or ``failure`` (anything else: a traceback, another exit code, a hang,
debris, a parity miss).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import signal
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from mobius.testing.fuzz_cases import (  # noqa: F401 - re-exported: the test and script use them
    BASES,
    MORE_BASES,
    Case,
    cases,
    make_bases,
    make_cases,
    write_case,
)

ATOL = 1e-4
RUNTIME_KEYS = ("_attn_implementation", "attn_implementation", "_experts_implementation")

# --------------------------------------------------------------------------- running a case


@dataclass
class Outcome:
    kind: str  # "converted", "refused" or "failure"
    detail: str  # the error line, or what went wrong
    seconds: float = 0.0
    diff: float | None = None

    @property
    def ok(self) -> bool:
        return self.kind in ("converted", "refused")


class TimeBound(BaseException):
    """Raised by SIGALRM in the main thread when a case runs past its time bound."""


@contextlib.contextmanager
def _time_bound(seconds: float):
    def _raise(signum, frame):
        raise TimeBound(f"no result after {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in directory.rglob("*")
    }


@contextlib.contextmanager
def _handlers_to(stream: io.StringIO):
    """Send every logging handler that writes to a terminal stream (transformers has its own,
    made at import with the stderr of that time) to ``stream`` while the block runs."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    swapped = []
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if type(handler) is logging.StreamHandler:
                # the attribute, not setStream(): that flushes the old stream, which may be an
                # earlier test's captured stderr, closed by now
                swapped.append((handler, handler.stream))
                handler.stream = stream
    try:
        yield
    finally:
        for handler, old in swapped:
            handler.stream = old


def run_cli(argv: list[str], timeout: float) -> tuple[int | None, str, str | None]:
    """(exit code, stderr, traceback) of ``mobius.cli.main(argv)`` run in this process."""
    from mobius.cli import main

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    mobius_level = logging.getLogger("mobius").level
    sigterm = signal.getsignal(signal.SIGTERM)
    err = io.StringIO()
    code, tb = None, None
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            with _time_bound(timeout), _handlers_to(err):
                code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - every escape is a finding
        tb = "".join(traceback.format_exception(exc))
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, TimeBound):
            raise
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        logging.getLogger("mobius").setLevel(mobius_level)
        signal.signal(signal.SIGTERM, sigterm)
    return code, err.getvalue(), tb


def run_case(case: Case, bases: dict[str, Path], workdir: Path, timeout: float = 60.0) -> Outcome:
    """Build the mutated checkpoint through the CLI and check the property (see module docstring)."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    try:
        checkpoint = write_case(case, bases, workdir / "ckpt")
        before = _snapshot(checkpoint)
        output = workdir / "out"
        started = time.perf_counter()
        code, err, tb = run_cli(
            ["build", "--model", str(checkpoint), "--output", str(output), "-q"], timeout
        )
        seconds = time.perf_counter() - started
        lines = err.strip().splitlines()
        debris = [p.name for p in workdir.glob(".out*")]
        if tb is not None:
            last = tb.strip().splitlines()[-1]
            kind = "hang" if "TimeBound" in last else "traceback"
            return Outcome("failure", f"{kind}: {last}\n{tb}", seconds)
        if debris:
            return Outcome("failure", f"exit {code}, temporary files left: {debris}", seconds)
        if _snapshot(checkpoint) != before:
            return Outcome("failure", f"exit {code}, the checkpoint directory changed", seconds)
        if code == 2:
            if len(lines) != 1 or not lines[0].startswith("mobius: error: "):
                return Outcome("failure", f"exit 2 without one error line: {err!r}", seconds)
            if output.exists():
                return Outcome("failure", f"exit 2 but {output} exists: {lines[0]}", seconds)
            return Outcome("refused", lines[0], seconds)
        if code != 0:
            return Outcome("failure", f"exit {code}: {err.strip()}", seconds)
        if not (output / "model.onnx").is_file():
            return Outcome("failure", "exit 0 without model.onnx", seconds)
        return _check_parity(checkpoint, output, seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _check_parity(checkpoint: Path, output: Path, seconds: float) -> Outcome:
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    from mobius.testing.parity import max_abs_diff

    # mobius chooses the attention implementation itself and ignores these; HF's loader trips on
    # junk in them, which says nothing about the conversion
    config = json.loads((checkpoint / "config.json").read_text())
    for key in RUNTIME_KEYS:
        config.pop(key, None)
    (checkpoint / "config.json").write_text(json.dumps(config))
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            task = json.loads((output / "mobius.json").read_text())["task"]
            auto = AutoModelForCausalLM if task == "text-generation" else AutoModel
            model = auto.from_pretrained(
                checkpoint, attn_implementation="eager", dtype=torch.float32
            ).eval()
    except Exception as exc:  # noqa: BLE001
        return Outcome("failure", f"converted, but HF cannot load the checkpoint: {exc!r}", seconds)
    try:
        diff = max_abs_diff(model, output, model.config)
    except Exception as exc:  # noqa: BLE001
        return Outcome("failure", f"converted, but the parity run failed: {exc!r}", seconds)
    if not diff <= ATOL:
        return Outcome(
            "failure", f"converted without parity: max abs diff {diff:.3g}", seconds, diff
        )
    return Outcome("converted", f"max abs diff {diff:.2g}", seconds, diff)
