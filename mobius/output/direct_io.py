"""Write large tensors to the external-data file past the page cache (``O_DIRECT``), on request.

A buffered ``write`` copies every byte into a page-cache page the kernel allocates (and, once
memory is full of cache, first reclaims); a direct write lets the device read the bytes from our
buffer, but the process then waits for the device. Measured on this project's 2-core VM
(docs/benchmarks.md, "Warm conversions"), buffered writes finished sooner in every case: a warm
Llama-3.1-8B bf16 -> f16 hit (21.9 against 25.0 s), a cold Llama-3.2-3B f16 build (13.2 against
15.6 s, and less CPU), a cold 3B int4 build (42.8 against 43.2 s), a warm Qwen2.5-0.5B f32 hit
(2.1 against 3.0 s). So writes are buffered, and ``MOBIUS_DIRECT_IO=1`` turns direct writes on.

When on, a tensor's bytes go through a page-aligned staging buffer and are written with
``O_DIRECT`` in aligned blocks; the unaligned head and tail of each tensor (the bytes that share
a 4 KiB block with a neighbour) are written through the normal descriptor, so the file's layout
and bytes are exactly those of a buffered write. Where the file system refuses ``O_DIRECT``
(tmpfs, some network mounts) the writes stay buffered.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections.abc import Iterator

# Direct writes must start at, and be a multiple of, the device's logical block size: 4 KiB
# covers every common device (512-byte ones included).
ALIGN = 4096
# Tensors smaller than this are written as before: a direct write waits for the device, which
# only pays for itself when the copy it saves is large.
MIN_BYTES = 1 << 20
# Bytes staged before each direct write (a multiple of ALIGN).
STAGE_BYTES = 8 << 20

_LOCAL = threading.local()  # this thread's free staging buffer
_REFUSED: set[str] = set()  # files whose file system refused O_DIRECT once: buffered from then on


def enabled() -> bool:
    """Whether direct writes are asked for (``MOBIUS_DIRECT_IO=1``) and ``os.O_DIRECT`` exists."""
    return hasattr(os, "O_DIRECT") and os.environ.get("MOBIUS_DIRECT_IO", "0") == "1"


class _Buffered:
    """The plain path: every chunk straight to ``file.write``."""

    def __init__(self, file) -> None:
        self.write = file.write


class DirectWriter:
    """Appends bytes at a file position: the aligned middle by ``O_DIRECT``, head and tail buffered.

    One writer per tensor, with its own ``O_DIRECT`` descriptor (opened and closed by ``writer``:
    nothing is shared between saves); each thread reuses one staging buffer.
    """

    def __init__(self, file, path: str, direct_fd: int, stage: memoryview) -> None:
        file.flush()
        self.file = file
        self.fd = file.fileno()
        self.direct_fd = direct_fd
        self.path = path
        self.pos = file.tell()  # file offset of the next byte written
        self.stage = stage
        self.filled = 0  # bytes of stage holding data; stage[0] is at file offset self.pos

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        head = min(len(view), -self.pos % ALIGN) if self.filled == 0 else 0
        if head:
            self._buffered(view[:head], self.pos)
            self.pos += head
            view = view[head:]
        while len(view):
            take = min(len(view), len(self.stage) - self.filled)
            self.stage[self.filled : self.filled + take] = view[:take]
            self.filled += take
            view = view[take:]
            if self.filled == len(self.stage):
                self._flush(self.filled)

    def close(self) -> None:
        """Write what is staged (the last partial block buffered) and leave the file after it."""
        aligned = self.filled - self.filled % ALIGN
        if aligned:
            self._flush(aligned)
        if self.filled:
            self._buffered(self.stage[: self.filled], self.pos)
            self.pos += self.filled
            self.filled = 0
        self.file.seek(self.pos)

    def _flush(self, nbytes: int) -> None:
        """Write the first ``nbytes`` (a multiple of ALIGN) of the stage at ``pos``, directly."""
        chunk = self.stage[:nbytes]
        if self.direct_fd >= 0:
            try:
                _write_all(self.direct_fd, chunk, self.pos)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # the file system took the open but not the write: buffered from here on
                _REFUSED.add(self.path)
                self.direct_fd = -1
        if self.direct_fd < 0:
            self._buffered(chunk, self.pos)
        self.pos += nbytes
        rest = self.filled - nbytes
        if rest:
            self.stage[:rest] = self.stage[nbytes : self.filled]
        self.filled = rest

    def _buffered(self, chunk: memoryview, offset: int) -> None:
        _write_all(self.fd, chunk, offset)


def _write_all(fd: int, chunk: memoryview, offset: int) -> None:
    while len(chunk):
        done = os.pwrite(fd, chunk, offset)
        chunk, offset = chunk[done:], offset + done


def _take_stage() -> mmap.mmap:
    """This thread's page-aligned staging buffer (anonymous memory is page aligned), or a new one
    while it is in use."""
    stage = getattr(_LOCAL, "stage", None)
    _LOCAL.stage = None
    return stage if stage is not None else mmap.mmap(-1, STAGE_BYTES)


def _give_back(stage: mmap.mmap) -> None:
    if getattr(_LOCAL, "stage", None) is None and len(stage) == STAGE_BYTES:
        _LOCAL.stage = stage
    else:
        stage.close()


def release() -> None:
    """Free this thread's staging buffer (a finished writer thread's goes with the thread)."""
    stage = getattr(_LOCAL, "stage", None)
    _LOCAL.stage = None
    if stage is not None:
        stage.close()


@contextlib.contextmanager
def writer(file, nbytes: int) -> Iterator[DirectWriter | _Buffered]:
    """A ``write(bytes)`` target for ``nbytes`` of one tensor at ``file``'s position.

    Direct where it can be (a real file, a large tensor, a file system that takes ``O_DIRECT``),
    else ``file.write`` itself.
    """
    path = getattr(file, "name", None)
    if (
        nbytes < MIN_BYTES
        or not enabled()
        or not isinstance(path, str)
        or path in _REFUSED
        or not hasattr(file, "fileno")
    ):
        yield _Buffered(file)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise
        _REFUSED.add(path)
        yield _Buffered(file)
        return
    stage = _take_stage()
    view = memoryview(stage)
    try:
        out = DirectWriter(file, path, fd, view)
        yield out
        out.close()
    finally:
        os.close(fd)
        view.release()
        _give_back(stage)


class DirectTofile:
    """Mixin for a lazy tensor (``onnx_ir.LazyTensor``): its bytes go through ``writer``."""

    nbytes: int

    def tofile(self, file) -> None:
        with writer(file, self.nbytes) as out:
            super().tofile(out)  # type: ignore[misc]
