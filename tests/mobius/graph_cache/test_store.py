"""The cache on disk: --no-cache, list and clear, a corrupt or partial entry (one warning,
rewritten), and two processes filling one entry at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mobius.cli import main
from mobius.graph_cache import store
from tests.mobius.graph_cache.conftest import assert_same_package

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    from mobius.testing.tiny import make_checkpoint

    directory = tmp_path_factory.mktemp("store") / "llama"
    make_checkpoint("llama", directory)
    return str(directory)


def _build(src: str, out: Path, *extra: str, quiet: bool = True) -> None:
    flags = ["-q"] if quiet else []
    assert main(["build", "--model", src, "--output", str(out), *flags, *extra]) == 0


def _entries(cache: Path) -> list[Path]:
    graphs = cache / "graphs"
    return (
        sorted(p for p in graphs.iterdir() if not p.name.startswith(".")) if graphs.exists() else []
    )


def test_no_cache_list_and_clear(cache, tmp_path, llama, capsys):
    _build(llama, tmp_path / "off", "--no-cache")
    assert _entries(cache) == []
    _build(llama, tmp_path / "on")
    assert len(_entries(cache)) == 1
    capsys.readouterr()
    assert main(["cache", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["key"] for e in listed["entries"]] == [p.name for p in _entries(cache)]
    assert listed["entries"][0]["model_type"] == "llama"
    assert main(["cache", "list"]) == 0
    assert "llama" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 graph cache entries" in capsys.readouterr().out
    assert _entries(cache) == []


@pytest.mark.parametrize("damage", ["corrupt", "partial", "unloadable"])
def test_unusable_entry_warned_once_and_rewritten(cache, tmp_path, llama, caplog, damage):
    _build(llama, tmp_path / "first")
    (entry,) = _entries(cache)
    if damage == "corrupt":
        data = (entry / "weights.pkl").read_bytes()
        (entry / "weights.pkl").write_bytes(data[: len(data) // 2])
    elif damage == "partial":
        (entry / "model.onnx").unlink()
    else:  # intact checksums, contents no build can use
        (entry / "weights.pkl").write_bytes(b"not a pickle")
        manifest = json.loads((entry / store.MANIFEST).read_text())
        manifest["files"]["weights.pkl"] = store._digest(b"not a pickle")
        (entry / store.MANIFEST).write_text(json.dumps(manifest))
    caplog.clear()
    _build(llama, tmp_path / "second", quiet=False)
    warnings = [r for r in caplog.records if "graph cache entry" in r.getMessage()]
    assert len(warnings) == 1 and "unusable" in warnings[0].getMessage()
    assert_same_package(tmp_path / "first", tmp_path / "second")
    (entry,) = _entries(cache)
    assert store.lookup(entry.name) is not None  # rewritten whole
    caplog.clear()
    _build(llama, tmp_path / "third", quiet=False)
    assert not [r for r in caplog.records if "graph cache entry" in r.getMessage()]
    assert_same_package(tmp_path / "first", tmp_path / "third")


def test_two_processes_fill_one_entry(cache, tmp_path, llama):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOBIUS_CACHE": str(cache)}
    env.pop("MOBIUS_NO_CACHE", None)
    command = [sys.executable, "-m", "mobius", "build", "--model", llama, "-q", "--output"]
    runs = [
        subprocess.Popen([*command, str(tmp_path / name)], env=env, stderr=subprocess.PIPE)
        for name in ("one", "two")
    ]
    for run in runs:
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err.decode()
        assert b"unusable" not in err
    assert_same_package(tmp_path / "one", tmp_path / "two")
    (entry,) = _entries(cache)
    assert store.lookup(entry.name) is not None
    assert not [p for p in (cache / "graphs").iterdir() if p.name.startswith(".")]
    _build(llama, tmp_path / "three")
    assert_same_package(tmp_path / "one", tmp_path / "three")
