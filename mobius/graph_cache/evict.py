"""The graph cache's size cap: after a build keeps an entry, the least recently used entries go
until the cache fits.

The cap is ``$MOBIUS_CACHE_MAX_BYTES`` (bytes, or with a ``K``/``M``/``G`` suffix in powers of
1024; ``0``: no cap), 2 GiB by default. An entry's last use is when a build filled or hit it (its
directory's modification time, ``store.Entry.last_used``). The entry just kept is never removed,
even where it alone is over the cap; an entry a build is reading is skipped (``store.remove``);
writes under way are not entries yet and count for nothing.
"""

from __future__ import annotations

import logging
import os

from mobius.graph_cache import store

__all__ = ["DEFAULT_MAX_BYTES", "max_bytes", "trim"]

log = logging.getLogger("mobius")

DEFAULT_MAX_BYTES = 2 << 30
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
ENVIRONMENT = "MOBIUS_CACHE_MAX_BYTES"


def max_bytes() -> int | None:
    """The cap in bytes; None for no cap (``0``). A value that is not a size is warned about and
    the default used."""
    given = os.environ.get(ENVIRONMENT, "").strip()
    if not given:
        return DEFAULT_MAX_BYTES
    text = given.upper().removesuffix("B").removesuffix("I")
    try:
        number, unit = (text[:-1], text[-1]) if text[-1] in _UNITS else (text, "")
        value = int(float(number) * _UNITS[unit])
    except (ValueError, IndexError, OverflowError):
        log.warning(
            "%s=%r is not a size (bytes, or 500M, 2G); using %d",
            ENVIRONMENT,
            given,
            DEFAULT_MAX_BYTES,
        )
        return DEFAULT_MAX_BYTES
    return value if value > 0 else None


def trim(keep: str | None = None) -> list[str]:
    """Remove the least recently used entries, but ``keep`` and those being read, until the
    cache is within its cap; returns the keys removed, oldest use first."""
    cap = max_bytes()
    if cap is None:
        return []
    sized = []
    for entry in store.entries():
        try:
            sized.append((entry.last_used(), entry.size(), entry))
        except OSError:  # removed meanwhile
            continue
    total = sum(size for _, size, _ in sized)
    removed = []
    for _, _, entry in sorted(sized, key=lambda row: row[0]):
        if total <= cap:
            break
        if entry.key == keep:
            continue
        freed = store.remove(entry.path)
        if freed is not None:
            total -= freed
            removed.append(entry.key)
    if removed:
        log.info(
            "graph cache over %d bytes: removed %d least recently used entries", cap, len(removed)
        )
    return removed
