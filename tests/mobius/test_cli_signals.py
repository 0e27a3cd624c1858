"""Real SIGINT and SIGTERM during tracing, emitting and writing: exit 130/143, nothing left.

Each build runs in a child process that sends itself the signal at a chosen point
(``_interrupt_at.py``), so every step is hit every time; one more test sends the signal from
outside, as a user or a CI runner would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

INTERRUPT_AT = Path(__file__).with_name("_interrupt_at.py")
REPO = Path(__file__).resolve().parents[2]


def _default_signals() -> None:
    # a job started in the background of a non-interactive shell ignores SIGINT, and so would
    # the child; mobius handles it anyway, but the test should not depend on that
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _debris(out: Path) -> list[Path]:
    return list(out.parent.glob(f".{out.name}*"))


def _check_stopped(
    proc: subprocess.CompletedProcess | subprocess.Popen, err: str, out: Path, code: int
):
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("mobius: error: "), err
    assert "the output was not written" in lines[-1], err
    assert "fallback" not in err, f"the interrupt was taken for a trace failure: {err}"
    assert "Traceback" not in err, err
    assert not out.exists(), "an output directory was left"
    assert not _debris(out), f"temporary debris left behind: {_debris(out)}"


@pytest.mark.parametrize(
    ("step", "signame", "options", "code"),
    [
        ("tracing", "SIGINT", [], 130),
        ("tracing", "SIGINT", ["convert"], 130),  # the bug report: a TypeError, not chained
        ("tracing", "SIGTERM", ["convert"], 143),
        ("emitting", "SIGINT", [], 130),
        ("writing", "SIGTERM", [], 143),
    ],
)
def test_signal_at_each_step_stops_cleanly(checkpoints, tmp_path, step, signame, options, code):
    directory, _, _ = checkpoints.get("llama")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(INTERRUPT_AT), step, signame, *options, "--"]
        + ["--model", str(directory), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        preexec_fn=_default_signals,
    )
    _check_stopped(proc, proc.stderr, out, code)


def test_sigint_from_outside_while_tracing(checkpoints, tmp_path):
    directory, _, _ = checkpoints.get("llama")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mobius", "build", "--model", str(directory), "--output", str(out)]
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, text=True, cwd=REPO, preexec_fn=_default_signals
    )
    try:
        seen = []
        deadline = time.monotonic() + 120
        for line in proc.stderr:  # progress lines, at INFO
            seen.append(line)
            if line.startswith("mobius: tracing"):
                break
            assert time.monotonic() < deadline, "the build never started tracing"
        else:
            pytest.fail(f"the build ended before tracing: {''.join(seen)}")
        time.sleep(0.3)  # into torch.export
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(seen) + rest
    assert "built" not in rest, f"the signal came too late to test tracing: {err}"
    _check_stopped(proc, err, out, 130)


@pytest.mark.parametrize("delay", [0.05, 0.2])
def test_sigint_after_the_package_is_written_exits_0(checkpoints, tmp_path, delay):
    # the interpreter's shutdown after "wrote ..." puts the default handlers back: a signal then
    # must not turn a complete package into exit 130
    directory, _, _ = checkpoints.get("llama")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mobius", "build", "--model", str(directory), "--output", str(out)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        preexec_fn=_default_signals,
    )  # fmt: skip
    try:
        for line in proc.stdout:
            if line.startswith("wrote "):
                break
        else:
            pytest.fail(f"the build wrote nothing: {proc.communicate(timeout=60)[1]}")
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert (out / "model.onnx").is_file() and (out / "mobius.json").is_file()
    assert not _debris(out)
