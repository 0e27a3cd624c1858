"""onnxruntime sessions of the package under test: a graph onnxruntime cannot load is an input
error (exit 2), said in one line, not a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mobius.errors import MobiusError

T = TypeVar("T")


class PackageError(MobiusError):
    """The package cannot be read or run (exit 2)."""


def opened(factory: Callable[[], T], path: Path) -> T:
    """``factory()`` (which creates onnxruntime sessions for ``path``), with onnxruntime's
    refusals as one-line PackageErrors."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    refusals = tuple(
        getattr(ort_state, name)
        for name in ("Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "NoSuchFile")
        if hasattr(ort_state, name)
    )
    try:
        return factory()
    except refusals as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PackageError(f"onnxruntime cannot load {path}: {first[:300]}") from exc
