"""onnxruntime sessions of the package under test: a graph onnxruntime cannot load is an input
error (exit 2), said in one line, not a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from mobius.errors import MobiusError

T = TypeVar("T")


class PackageError(MobiusError):
    """The package cannot be read or run (exit 2)."""


def _refusals() -> tuple[type[BaseException], ...]:
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    names = ("Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "NoSuchFile")
    names += ("RuntimeException", "NotImplemented", "EPFail")
    return tuple(getattr(ort_state, n) for n in names if hasattr(ort_state, n))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def opened(factory: Callable[[], T], path: Path) -> T:
    """``factory()`` (which creates onnxruntime sessions for ``path``), with onnxruntime's
    refusals as one-line PackageErrors."""
    try:
        return factory()
    except _refusals() as exc:
        raise PackageError(f"onnxruntime cannot load {path}: {_first_line(exc)}") from exc


@contextlib.contextmanager
def running(package: Path) -> Iterator[None]:
    """onnxruntime failing on the contract's inputs is a one-line PackageError (exit 2)."""
    try:
        yield
    except _refusals() as exc:
        raise PackageError(f"onnxruntime failed running {package}: {_first_line(exc)}") from exc
