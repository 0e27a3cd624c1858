"""Atomic output: an interrupted or failing build leaves no target directory and no debris."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mobius.cli import main

# A tiny llama with a large vocabulary: ~300 MB of f32 weights, so writing them takes long
# enough to be interrupted part-way.
BIG_VOCAB = 600_000


@pytest.fixture(scope="session")
def big_checkpoint(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("big") / "llama"
    code = (
        "import sys; from pathlib import Path; from mobius.testing.tiny import make_checkpoint; "
        f"make_checkpoint('llama', Path(sys.argv[1]), vocab_size={BIG_VOCAB})"
    )
    # a subprocess, so the ~300 MB model does not stay in the test process
    subprocess.run([sys.executable, "-c", code, str(directory)], check=True, capture_output=True)
    return directory


def _debris(out: Path) -> list[Path]:
    return list(out.parent.glob(f".{out.name}*"))


def _writing_weights(out: Path) -> bool:
    """The build's temporary directory holds the external data file being written."""
    return any(
        "model.onnx.data" in p.name for tmp in _debris(out) for p in tmp.rglob("*") if p.is_file()
    )


def _default_signals() -> None:
    # a job started in the background of a non-interactive shell (`.ci/run &`) ignores SIGINT,
    # and so does every child, whose Python then never turns SIGINT into KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_while_writing_weights_leaves_nothing(big_checkpoint, tmp_path, signum, code):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mobius", "build", "--model", str(big_checkpoint)]
    proc = subprocess.Popen(
        [*cmd, "--output", str(out), "-q"],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
    )
    try:
        deadline = time.monotonic() + 120
        while not _writing_weights(out):
            assert proc.poll() is None, f"the build ended before writing: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "the build never started writing weights"
            time.sleep(0.005)
        assert not out.exists()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mobius: error: "), err
    assert not out.exists(), "a half-written output directory was left"
    assert not _debris(out), f"temporary debris left behind: {_debris(out)}"


def test_disk_full_while_writing_weights(checkpoints, tmp_path, monkeypatch, capsys):
    from onnx_ir import external_data

    directory, _, _ = checkpoints.get("llama")
    write = external_data._write_tensor_at
    calls = []

    def fill_disk(tensor, file, offset):
        calls.append(tensor.name)
        if len(calls) == 3:  # part-way: two tensors are already on disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(tensor, file, offset)

    monkeypatch.setattr(external_data, "_write_tensor_at", fill_disk)
    out = tmp_path / "out"
    capsys.readouterr()
    code = main(["build", "--model", str(directory), "--output", str(out), "-q"])
    err = capsys.readouterr().err.strip()
    # the third write failed; with two writer threads the other may have started one or two more
    assert len(calls) >= 3
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("mobius: error: ")
    assert "disk is full" in err
    assert not out.exists()
    assert not _debris(out), f"temporary debris left behind: {_debris(out)}"


def test_disk_full_keeps_the_previous_output(checkpoints, tmp_path, monkeypatch, capsys):
    from onnx_ir import external_data

    directory, _, _ = checkpoints.get("llama")
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.onnx").write_text("previous build")

    def full(tensor, file, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(external_data, "_write_tensor_at", full)
    capsys.readouterr()
    code = main(["build", "--model", str(directory), "--output", str(out), "-q", "--overwrite"])
    assert code == 2
    assert [p.name for p in out.iterdir()] == ["model.onnx"]
    assert (out / "model.onnx").read_text() == "previous build"
    assert not [p for p in _debris(out)], "temporary debris left behind"
