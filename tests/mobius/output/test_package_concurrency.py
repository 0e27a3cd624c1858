"""Concurrency and disk: builds racing for one output, parallel builds, read-only input, free space."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from mobius.cli import main
from mobius.output.package import _lock_path

FILES = ("model.onnx", "model.onnx.data", "mobius.json", "explain.json", "config.json")


def _start(checkpoint: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "mobius", "build", "--model", str(checkpoint)]
    return subprocess.Popen(
        [*cmd, "--output", str(out), "-q", *extra], stderr=subprocess.PIPE, text=True
    )


def _debris(out: Path) -> list[Path]:
    return list(out.parent.glob(f".{out.name}*"))


def _snapshot(directory: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(directory.rglob("*"))
    }


@pytest.mark.parametrize("overwrite", [False, True])
def test_two_builds_into_one_output_and_one_beside(checkpoints, tmp_path, overwrite):
    """Three builds at once: two into ``out`` (one wins, the other exits 2 and leaves nothing,
    ``out`` is entirely the winner's) and one into ``beside``, whose files are byte-identical."""
    directory, _, _ = checkpoints.get("llama")
    out, beside = tmp_path / "out", tmp_path / "beside"
    extra = ("--overwrite",) if overwrite else ()
    if overwrite:  # an older output, replaced whole: its stray file must not survive
        out.mkdir()
        (out / "stale.txt").write_text("from an older build")
    # the lock is taken before torch is imported, so the two builds into `out` overlap for
    # seconds; both start within milliseconds
    procs = [
        _start(directory, out, *extra),
        _start(directory, out, *extra),
        _start(directory, beside),
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    racing = sorted(results[:2])
    assert [code for code, _ in racing] == [0, 2], results
    lines = racing[1][1].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mobius: error: another mobius build"), lines
    assert results[2][0] == 0, results[2][1]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in beside.iterdir())
    for name in FILES:
        assert (out / name).read_bytes() == (beside / name).read_bytes(), name
    assert not _debris(out) and not _debris(beside)
    assert not _lock_path(out).exists() and not _lock_path(beside).exists()


def test_read_only_checkpoint(checkpoints, tmp_path, capsys):
    """A checkpoint directory without write permission converts, and nothing in it changes.

    The tests run as root, whom mode bits do not stop; what proves that mobius writes nothing
    there is the snapshot (names, sizes, times, modes) taken before and compared after.
    """
    directory, _, _ = checkpoints.get("llama")
    checkpoint = tmp_path / "ro"
    shutil.copytree(directory, checkpoint)
    for path in [checkpoint, *checkpoint.iterdir()]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    before = _snapshot(checkpoint)
    try:
        code = main(["build", "--model", str(checkpoint), "--output", str(tmp_path / "out"), "-q"])
        assert code == 0, capsys.readouterr().err
        assert (tmp_path / "out" / "model.onnx").is_file()
        assert _snapshot(checkpoint) == before
    finally:
        checkpoint.chmod(0o755)


def test_not_enough_free_space_is_refused_before_writing(
    checkpoints, tmp_path, monkeypatch, capsys
):
    from onnx_ir import external_data

    import mobius.output.package

    directory, _, _ = checkpoints.get("llama")
    usage = namedtuple("usage", "total used free")
    probed = []

    def small_disk(path):
        probed.append(Path(path))
        return usage(10 << 30, 10 << 30, 1 << 20)  # 1 MiB free: less than the margin alone

    def no_write(*args):
        raise AssertionError("a weight was written after the space check")

    monkeypatch.setattr(mobius.output.package.shutil, "disk_usage", small_disk)
    monkeypatch.setattr(external_data, "_write_tensor_at", no_write)
    out = tmp_path / "sub" / "out"
    capsys.readouterr()
    code = main(["build", "--model", str(directory), "--output", str(out), "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("mobius: error: not enough free space")
    assert "MiB" in err
    assert probed == [tmp_path]  # the nearest existing parent: `sub` is not created yet
    assert not out.parent.exists()


def test_free_space_estimate_is_the_weights(checkpoints):
    """The estimate is the bytes of the initializers in the target dtype: f16 weights take half
    of f32, up to a few small constants that keep their type (rotary frequencies)."""
    import mobius

    directory, _, _ = checkpoints.get("llama")
    f32, f16 = mobius.build(directory), mobius.build(directory, dtype="f16")
    weights = (directory / "model.safetensors").stat().st_size  # f32, plus a small header
    extras = sum(p.stat().st_size for p in f32.extra_files)
    assert weights * 0.9 < f32.nbytes() - extras <= weights
    assert abs((f16.nbytes() - extras) - (f32.nbytes() - extras) / 2) < 1024


def test_lock_file_is_per_output_and_removed(tmp_path):
    from mobius.output.package import output_lock

    with output_lock(tmp_path / "a"), output_lock(tmp_path / "b"):
        assert _lock_path(tmp_path / "a").exists() and _lock_path(tmp_path / "b").exists()
        assert _lock_path(tmp_path / "a") != _lock_path(tmp_path / "b")
        with output_lock(tmp_path / "a"):  # reentrant within one process (CLI, then save)
            pass
        assert _lock_path(tmp_path / "a").exists()
    assert not _lock_path(tmp_path / "a").exists()
