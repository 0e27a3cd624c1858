"""The graph cache on disk: one directory per key, written whole or not at all.

``$MOBIUS_CACHE`` (default ``~/.cache/mobius``) holds ``graphs/<key>/``, each with a
``manifest.json`` that lists its files with their sha256. An entry is written into a temporary
directory beside its final place and renamed there complete, so a reader never sees half of one.
When two builds fill the same entry at once, the first rename wins and the other build drops its
copy: both copies are the same graph. An entry whose files are missing, changed or unreadable is
ignored with one warning, removed, and written again by the build that found it.

A reader holds a shared ``flock`` on the entry's directory while it reads (``lookup`` to
``Entry.release``), and a hit sets the directory's modification time (its last use). Removing an
entry (``remove``: eviction, ``cache clear``) takes the exclusive lock without waiting, so an
entry being read is skipped, then renames it aside; a reader that got its lock after that finds
the directory gone and misses.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mobius.graph_cache.key import FORMAT

try:
    import fcntl
except ImportError:  # Windows: no flock; an entry used in the last minutes is never removed
    fcntl = None  # type: ignore[assignment]

__all__ = ["Entry", "cache_root", "entries", "clear", "lookup", "put", "discard", "remove"]

log = logging.getLogger("mobius")

MANIFEST = "manifest.json"
_GRAPHS = "graphs"
UNLOCKED_GRACE_S = 600  # without flock: an entry used this recently is not removed


def cache_root() -> Path:
    """``$MOBIUS_CACHE``, else ``$XDG_CACHE_HOME/mobius``, else ``~/.cache/mobius``."""
    configured = os.environ.get("MOBIUS_CACHE")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "mobius"


@dataclass
class Entry:
    """One cached build: its directory and manifest (``files``: name -> sha256); ``lock``: the
    descriptor holding a reader's shared lock on it (``lookup``), until ``release``."""

    path: Path
    manifest: dict[str, Any]
    lock: int | None = None

    def read(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    @property
    def key(self) -> str:
        return self.path.name

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())

    def last_used(self) -> float:
        """When a build last filled or hit this entry (the directory's modification time)."""
        return self.path.stat().st_mtime

    def release(self) -> None:
        """Let the entry be removed again (a reader is done with its files)."""
        if self.lock is not None and self.lock >= 0:
            os.close(self.lock)
        self.lock = None

    def __enter__(self) -> Entry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # (at interpreter exit, os may be gone)
            self.release()


def _hold(path: Path, *, exclusive: bool) -> int | None:
    """A descriptor of the entry directory ``path`` holding its lock: shared (a reader, waits
    for a removal under way) or exclusive (a removal, does not wait). None when the entry is gone,
    was replaced meanwhile, or (exclusive) is being read. -1 where there is no flock."""
    if fcntl is None:
        return -1 if path.is_dir() else None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
        same = os.fstat(fd).st_ino == os.stat(path).st_ino  # not renamed aside meanwhile
    except OSError:
        same = False
    if not same:
        os.close(fd)
        return None
    return fd


def _entry_dir(key: str) -> Path:
    return cache_root() / _GRAPHS / key


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check(path: Path) -> dict[str, Any]:
    """The manifest of the entry at ``path``; ValueError (why) if any file is missing or changed."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"its manifest is unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError("its manifest is of another format")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise ValueError("its manifest lists no files")
    for name, digest in files.items():
        try:
            data = (path / name).read_bytes()
        except OSError:
            raise ValueError(f"{name} is missing") from None
        if _digest(data) != digest:
            raise ValueError(f"{name} does not match its checksum")
    return manifest


def discard(path: Path, reason: str) -> None:
    """Warn once that the entry at ``path`` is unusable, and remove it (a later build rewrites it)."""
    log.warning(
        "graph cache entry %s is unusable (%s); ignoring it and writing it again", path.name, reason
    )
    trash = path.with_name(f".trash-{path.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(path, trash)  # atomic: a concurrent reader sees it or nothing
    except OSError:
        return  # already removed (or replaced) by another build
    shutil.rmtree(trash, ignore_errors=True)


def lookup(key: str) -> Entry | None:
    """The complete, intact entry for ``key``, or None (a miss; an unusable entry is discarded).
    The entry is held (not removed by eviction) until its ``release``; its last use is now."""
    path = _entry_dir(key)
    if not path.exists():
        return None
    lock = _hold(path, exclusive=False)
    if lock is None:
        return None  # removed while we looked: a miss
    entry = Entry(path, {}, lock)
    try:
        entry.manifest = _check(path)
    except ValueError as exc:
        entry.release()
        discard(path, str(exc))
        return None
    _touch(path)
    return entry


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def put(key: str, files: dict[str, bytes], manifest: dict[str, Any]) -> Path | None:
    """Write an entry for ``key`` holding ``files`` (name -> bytes) atomically; returns its path,
    or None when the cache cannot be written (the build goes on without it)."""
    final = _entry_dir(key)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=final.parent))
    except OSError as exc:
        log.warning("graph cache %s is not writable (%s); building without it", cache_root(), exc)
        return None
    writing = _hold(tmp, exclusive=True)  # ``clear`` leaves a write under way alone
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        document = {
            **manifest,
            "format": FORMAT,
            "created": time.time(),
            "files": {name: _digest(data) for name, data in files.items()},
        }
        (tmp / MANIFEST).write_text(
            json.dumps(document, indent=1, sort_keys=True), encoding="utf-8"
        )
        try:
            os.rename(tmp, final)
        except OSError:  # another build wrote the same entry first: keep that one
            if not final.is_dir():
                raise
            _touch(final)
    except OSError as exc:
        log.warning("could not write graph cache entry %s (%s)", final, exc)
    finally:
        if writing is not None and writing >= 0:
            os.close(writing)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final if final.is_dir() else None


def entries() -> list[Entry]:
    """Every complete entry in the cache (not checked against its checksums), oldest first."""
    base = cache_root() / _GRAPHS
    found = []
    for path in sorted(base.iterdir()) if base.is_dir() else ():
        if path.name.startswith(".") or not path.is_dir():
            continue
        with contextlib.suppress(OSError, ValueError):
            manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
            found.append(Entry(path, manifest))
    return sorted(found, key=lambda e: e.manifest.get("created", 0))


def remove(path: Path) -> int | None:
    """Remove the entry at ``path`` unless a build is reading it; the bytes freed, or None (being
    read, used in the last minutes where there is no flock, or already gone)."""
    lock = _hold(path, exclusive=True)
    if lock is None:
        return None
    try:
        if lock < 0 and time.time() - path.stat().st_mtime < UNLOCKED_GRACE_S:
            return None
        size = _tree_size(path)
        trash = path.with_name(f".trash-{path.name}-{os.getpid()}-{time.monotonic_ns()}")
        os.rename(path, trash)  # a reader waiting for its lock now finds the entry gone
    except OSError:
        return None
    finally:
        if lock >= 0:
            os.close(lock)
    shutil.rmtree(trash, ignore_errors=True)
    return size


def _tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def clear() -> tuple[int, int]:
    """Remove every entry not being read, and the leftovers of interrupted writes (not a write
    under way); returns (entries, bytes) freed."""
    base = cache_root() / _GRAPHS
    count = freed = 0
    for path in list(base.iterdir()) if base.is_dir() else ():
        if not path.is_dir():
            continue
        size = remove(path)
        if size is not None:  # (a write under way holds its directory: skipped)
            count += not path.name.startswith(".")
            freed += size
    return count, freed
