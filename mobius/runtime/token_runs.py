"""Runs of placeholder tokens in a prompt row: what the position recipes walk image by image."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def runs(flags: Sequence[bool]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each maximal run of true values in ``flags``, in order (``end`` one
    past the run's last index)."""
    i = 0
    while i < len(flags):
        if not flags[i]:
            i += 1
            continue
        start = i
        while i < len(flags) and flags[i]:
            i += 1
        yield start, i
