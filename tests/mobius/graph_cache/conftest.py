"""The graph cache on, in a directory of each test's own."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("MOBIUS_CACHE", str(root))
    monkeypatch.delenv("MOBIUS_NO_CACHE", raising=False)
    return root


@pytest.fixture
def no_cold_build(monkeypatch):
    """Call to make any later cold build fail: what follows must be a cache hit."""

    def forbid() -> None:
        import mobius

        def cold(*args, **kwargs):
            raise AssertionError("a cold build ran where the graph cache should have hit")

        monkeypatch.setattr(mobius, "build", cold)

    return forbid


def assert_same_package(left: Path, right: Path) -> None:
    """The two package directories hold the same files, byte for byte."""
    names = sorted(p.name for p in left.iterdir())
    assert names == sorted(p.name for p in right.iterdir())
    for name in names:
        assert filecmp.cmp(left / name, right / name, shallow=False), name
