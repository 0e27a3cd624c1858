"""The cache's size cap: least recently used entries go first (a hit counts as a use), the entry
just kept stays, and an entry a build is reading (in this process or another) is never removed
from under it; ``cache list`` shows the sizes, their total and the cap."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mobius.cli import main
from mobius.graph_cache import evict, store, warm

ROOT = Path(__file__).resolve().parents[3]
KIB = 1 << 10


def _put(key: str, size: int, used: float) -> Path:
    """An entry of ``size`` bytes of payload, last used at ``used`` (seconds since the epoch)."""
    path = store.put(key, {"weights.pkl": os.urandom(size)}, {"src": key, "summary": {}})
    os.utime(path, (used, used))
    return path


def _keys(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "graphs").iterdir() if not p.name.startswith("."))


@pytest.fixture
def three(cache, monkeypatch) -> list[str]:
    """Entries a, b, c of 10 KiB each, used in that order an hour apart; the cap fits two."""
    now = time.time()
    keys = ["a" * 64, "b" * 64, "c" * 64]
    for age, key in zip((3, 2, 1), keys, strict=True):
        _put(key, 10 * KIB, now - age * 3600)
    monkeypatch.setenv(evict.ENVIRONMENT, str(25 * KIB))
    return keys


def test_least_recently_used_go_first(cache, three):
    a, b, c = three
    entry = store.lookup(a)  # a hit: a is now the most recently used
    entry.release()
    d = "d" * 64
    _put(d, 10 * KIB, time.time())
    assert evict.trim(keep=d) == [b, c]  # 40 KiB over 25: the two oldest uses, b then c
    assert _keys(cache) == [a, d]


def test_entry_kept_even_alone_over_the_cap(cache, three, monkeypatch):
    monkeypatch.setenv(evict.ENVIRONMENT, "1K")
    assert evict.trim(keep=three[1]) == [three[0], three[2]]
    assert _keys(cache) == [three[1]]
    monkeypatch.setenv(evict.ENVIRONMENT, "0")  # no cap
    _put("e" * 64, 10 * KIB, time.time())
    assert evict.trim() == [] and len(_keys(cache)) == 2


def test_keep_after_a_build_trims(cache, three, tmp_path):
    d = "d" * 64
    pending = warm.Pending(d, [], {"weights.pkl": os.urandom(10 * KIB)}, {"src": d})
    warm.keep(pending, tmp_path)
    assert _keys(cache) == [three[2], d]  # the oldest two uses went


def test_entry_being_read_is_not_removed(cache, three, monkeypatch):
    a, b, c = three
    monkeypatch.setenv(evict.ENVIRONMENT, "5K")  # fits none
    with store.lookup(b) as reading, store.lookup(a):  # b, then a, are being read
        assert evict.trim() == [c]  # over the cap still, but nothing else may go
        assert reading.read("weights.pkl")
        assert store.clear() == (0, 0)  # nor does cache clear take them
    assert sorted(evict.trim()) == [a, b]  # released (used within the same clock tick)


def test_reader_in_another_process(cache, three, monkeypatch):
    a, b, c = three
    monkeypatch.setenv(evict.ENVIRONMENT, "5K")
    code = (
        "import sys; from mobius.graph_cache import store; "
        f"entry = store.lookup({a!r}); print('held', flush=True); sys.stdin.readline(); "
        "print(len(entry.read('weights.pkl')), flush=True)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    reader = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert reader.stdout.readline().strip() == b"held"
        assert evict.trim() == [b, c]  # a is the other process's
        out, _ = reader.communicate(b"\n", timeout=60)
    finally:
        reader.kill()
    assert out.strip() == str(10 * KIB).encode()  # it read its files whole
    assert evict.trim() == [a]


def test_removed_entry_is_a_miss(cache, three):
    path = store._entry_dir(three[0])
    assert store.remove(path) is not None
    assert store.lookup(three[0]) is None and not path.exists()
    assert store.remove(path) is None  # already gone


def test_bad_cap_warned_and_default_used(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="mobius")  # a CLI run before may have quieted it
    monkeypatch.setenv(evict.ENVIRONMENT, "lots")
    assert evict.max_bytes() == evict.DEFAULT_MAX_BYTES
    assert "MOBIUS_CACHE_MAX_BYTES" in caplog.text
    monkeypatch.setenv(evict.ENVIRONMENT, "1.5GiB")
    assert evict.max_bytes() == 3 << 29


def test_list_shows_sizes_total_and_cap(cache, three, capsys):
    assert main(["cache", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    sizes = [e["bytes"] for e in listed["entries"]]
    assert all(size > 10 * KIB for size in sizes)  # the payload and the manifest
    assert listed["total_bytes"] == sum(sizes) and listed["max_bytes"] == 25 * KIB
    assert main(["cache", "list"]) == 0
    text = capsys.readouterr().out
    assert "3 entries" in text and "at most 25 KiB" in text
    lines = text.splitlines()[1:]
    assert [line.split()[0] for line in lines] == [k[:16] for k in three]  # oldest use first
