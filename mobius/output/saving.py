"""What one running ``ModelPackage.save`` shares with the tensors it writes, in every writer
thread: the list a tensor found holding NaN or Inf is reported to, and each thread's reusable read
buffer (freed, with the direct writers' descriptors, once the model is written), and the heap
frozen for the garbage collector while they write."""

from __future__ import annotations

import contextlib
import gc
import mmap
import sys
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


def scratch(nbytes: int, purpose: str = "read") -> memoryview:
    """A buffer of ``nbytes`` reused by this thread from tensor to tensor while saving, one per
    ``purpose`` (``read``: a weight's bytes; ``slab``: a transposed slab being written; ``chunk``
    and ``cast``: a streamed chunk as read and as cast; ``cast_f32``: the float32 block of a bf16 ->
    f16 cast), page-aligned: a fresh
    buffer per weight costs a page fault and a zeroed page every 4 KiB (several CPU seconds over
    a 6 GB checkpoint). ``release_scratch`` frees them once the model is written."""
    buffers = getattr(_SCRATCH, "buffers", None)
    if buffers is None:
        buffers = _SCRATCH.buffers = {}
    buffer = buffers.get(purpose)
    if buffer is None or len(buffer) < nbytes:
        buffers.pop(purpose, None)  # the old one freed before the bigger one is made
        # anonymous memory starts on a page: a direct write can send it without staging
        buffer = buffers[purpose] = mmap.mmap(-1, max(nbytes, mmap.PAGESIZE))
    return memoryview(buffer)[:nbytes]


def release_scratch() -> None:
    """Free this thread's buffers and the direct writers' descriptors and staging buffer
    (``ModelPackage.save`` calls it when done)."""
    _SCRATCH.buffers = None
    direct_io.release()


# torch's intra-op thread count before the running save set it to one; empty: not set
_KERNEL_THREADS: list[int] = []
_KERNEL_LOCK = threading.Lock()
_PINNING: list[bool] = []  # a save that pins torch's kernels is running


def one_kernel_thread(torch) -> None:
    """torch's intra-op pool at one thread until the running save ends (nothing outside a save):
    the kernels run while writing (a cast, the NaN/Inf sum) are memory bound, and on a busy
    machine the pool's barriers cost more than the kernel (a 64 MiB sum measured 3.5x slower with
    two threads than with one at load 10). Called by each writer that uses torch, so a save that
    never needs torch never imports it."""
    with _KERNEL_LOCK:
        if _PINNING and not _KERNEL_THREADS:
            _KERNEL_THREADS.append(torch.get_num_threads())
            torch.set_num_threads(1)


@contextlib.contextmanager
def one_kernel_thread_while_saving() -> Iterator[None]:
    """The scope of ``one_kernel_thread``: pins at once where torch is loaded already, and gives
    torch its thread count back at the end."""
    _PINNING.append(True)
    torch = sys.modules.get("torch")
    if torch is not None:
        one_kernel_thread(torch)
    try:
        yield
    finally:
        with _KERNEL_LOCK:
            _PINNING.pop()
            if not _PINNING and _KERNEL_THREADS:
                sys.modules["torch"].set_num_threads(_KERNEL_THREADS.pop())


_FROZEN: list[bool] = []  # one entry per running save that froze the heap
_FROZEN_LOCK = threading.Lock()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """While saves run, the objects alive when the first began (the graphs: hundreds of
    thousands of nodes, values and attributes for a large model) are left out of the garbage
    collector's passes (``gc.freeze``); the writers' own garbage is still collected. Full passes
    over the graph had cost 0.1 s each, several per save."""
    with _FROZEN_LOCK:
        if not _FROZEN:
            gc.freeze()
        _FROZEN.append(True)
    try:
        yield
    finally:
        with _FROZEN_LOCK:
            _FROZEN.pop()
            if not _FROZEN:
                gc.unfreeze()
