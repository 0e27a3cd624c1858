"""Short names for sets of module paths that differ only in layer indices (``layers.0–31``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

DASH = "\u2013"  # en dash, as in "layers.0–31"
_INDEX = re.compile(r"(?<![^.])\d+(?![^.])")  # a whole numeric path segment


def ranges(indices: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0–2,5,7–8"``."""
    ordered = sorted(set(indices))
    runs: list[list[int]] = []
    for i in ordered:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}{DASH}{b}" for a, b in runs)


def compact(paths: Iterable[str]) -> list[str]:
    """Merge paths that differ only in their numeric segments, keeping first-seen order.

    ``model.layers.0.mlp``, ``model.layers.1.mlp`` -> ``model.layers.0–1.mlp``. Paths whose
    indices do not form a full grid (layer 0 has experts 0–3, layer 1 only 0–1) stay apart.
    """
    groups: dict[str, list[tuple[int, ...]]] = {}
    for path in dict.fromkeys(paths):
        template = _INDEX.sub("#", path)
        groups.setdefault(template, []).append(tuple(int(m) for m in _INDEX.findall(path)))
    out: list[str] = []
    for template, tuples in groups.items():
        if not tuples[0]:
            out.append(template)
            continue
        axes = [sorted({t[k] for t in tuples}) for k in range(len(tuples[0]))]
        full = 1
        for axis in axes:
            full *= len(axis)
        if full != len(tuples):
            out.extend(_fill(template, t) for t in tuples)
            continue
        out.append(_fill(template, tuple(ranges(axis) for axis in axes)))
    return out


def describe(paths: Iterable[str], limit: int = 4) -> str:
    """``compact`` as one phrase, at most ``limit`` items then ``and N more``."""
    items = [p or "<model>" for p in compact(paths)]
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _fill(template: str, values: tuple) -> str:
    parts = iter(str(v) for v in values)
    return re.sub("#", lambda _: next(parts), template)
