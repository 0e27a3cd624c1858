"""What one running ``ModelPackage.save`` shares with the tensors it writes, in every writer
thread: the list a tensor found holding NaN or Inf is reported to, and each thread's reusable read
buffer (freed, with the direct writers' descriptors, once the model is written)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar

from mobius.output import direct_io

# While ModelPackage.save runs, mobius.output.weights appends here the name of each tensor that it
# reads and finds NaN or Inf in (checked as the tensor is written: the data is read once).
NONFINITE: ContextVar[list[str] | None] = ContextVar("mobius_nonfinite", default=None)
# The same lists, for the threads that write weights (a ContextVar does not reach onnx_ir's pool).
_SAVING: list[list[str]] = []


def nonfinite_sink() -> list[str] | None:
    """The list a tensor found holding NaN/Inf is reported to, in any thread of a running save."""
    sink = NONFINITE.get()
    return sink if sink is not None or not _SAVING else _SAVING[-1]


@contextlib.contextmanager
def collecting_nonfinite() -> Iterator[list[str]]:
    """The list every thread of this save reports NaN/Inf tensors to, while the block runs."""
    nonfinite: list[str] = []
    token = NONFINITE.set(nonfinite)
    _SAVING.append(nonfinite)
    try:
        yield nonfinite
    finally:
        NONFINITE.reset(token)
        del _SAVING[next(i for i, x in enumerate(_SAVING) if x is nonfinite)]


_SCRATCH = threading.local()


def scratch(nbytes: int) -> memoryview:
    """A read buffer of ``nbytes`` reused by this thread from tensor to tensor while saving: a
    fresh buffer per weight costs a page fault and a zeroed page every 4 KiB (several CPU seconds
    over a 6 GB checkpoint). ``release_scratch`` frees it once the model is written."""
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or len(buffer) < nbytes:
        buffer = _SCRATCH.buffer = None  # the old one freed before the bigger one is made
        buffer = _SCRATCH.buffer = bytearray(nbytes)
    return memoryview(buffer)[:nbytes]


def release_scratch() -> None:
    """Free this thread's read buffer and the direct writers' descriptors and staging buffer
    (``ModelPackage.save`` calls it when done)."""
    _SCRATCH.buffer = None
    direct_io.release()
