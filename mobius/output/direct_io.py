"""Write large tensors to the external-data file past the page cache (``O_DIRECT``).

A buffered ``write`` copies every byte into a page-cache page the kernel allocates (and, once
memory is full of cache, first reclaims); a direct write lets the device read the bytes from our
buffer, but the process then waits for the device. Which finishes sooner depends on the size of
the save against the page cache (docs/design/weights-io.md, "Direct I/O"):

- up to the kernel's dirty background threshold (``vm.dirty_background_ratio`` of available
  memory, 2.36 GB on this project's 24 GB machine), buffered writes return as soon as the bytes are
  copied and the kernel flushes them later: a warm Qwen2.5-0.5B f32 hit (1.9 GB) took 2.1 s
  buffered against 3.0 s direct;
- past it, the flusher and page reclaim run beside the writers, and every buffered byte costs the
  copy and a page to reclaim: a warm Llama-3.1-8B bf16 -> f16 hit took 24.5 s buffered against
  14.1 s direct (medians of three, alternating with ``cp``, which took 16.3 s).

So a save whose weights exceed that threshold writes directly (``large_save``);
``MOBIUS_DIRECT_IO=1`` or ``0`` decides for every save.

A direct tensor's bytes go through a page-aligned staging buffer and are written with
``O_DIRECT`` in aligned blocks; bytes that already lie in page-aligned memory at a block boundary
of the file (a chunk cast into the writer's scratch buffer) are sent from where they are. The
unaligned head and tail of each tensor (the bytes that share a 4 KiB block with a neighbour) are
written through the normal descriptor, so the file's layout and bytes are exactly those of a
buffered write. Where the file system refuses ``O_DIRECT``
(tmpfs, some network mounts) the writes stay buffered.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import math
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

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


# one entry per running save (``large_save``): whether its weights exceed the dirty threshold
_LARGE: list[bool] = []
_LARGE_LOCK = threading.Lock()


def enabled() -> bool:
    """Whether the running save writes directly: ``MOBIUS_DIRECT_IO=1`` or ``0`` if set, else
    whether it is large (``large_save``); never where ``os.O_DIRECT`` does not exist."""
    if not hasattr(os, "O_DIRECT"):
        return False
    asked = os.environ.get("MOBIUS_DIRECT_IO", "")
    if asked in ("0", "1"):
        return asked == "1"
    with _LARGE_LOCK:
        return bool(_LARGE) and _LARGE[-1]


def dirty_background_bytes() -> float:
    """Dirty page-cache bytes past which the kernel starts flushing alongside the writers:
    ``vm.dirty_background_bytes``, else ``vm.dirty_background_ratio`` percent of available
    memory; infinite where ``/proc`` does not say (every write stays buffered)."""
    try:
        fixed = int(Path("/proc/sys/vm/dirty_background_bytes").read_text())
        if fixed > 0:
            return float(fixed)
        ratio = int(Path("/proc/sys/vm/dirty_background_ratio").read_text())
        meminfo = Path("/proc/meminfo").read_text()
    except (OSError, ValueError):
        return math.inf
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return ratio / 100 * int(line.split()[1]) * 1024
    return math.inf


@contextlib.contextmanager
def large_save(nbytes: int) -> Iterator[None]:
    """While the block runs, a save of ``nbytes`` of weights writes directly if they exceed the
    kernel's dirty background threshold (unless ``MOBIUS_DIRECT_IO`` decides)."""
    large = nbytes > dirty_background_bytes()
    with _LARGE_LOCK:
        _LARGE.append(large)
    try:
        yield
    finally:
        with _LARGE_LOCK:
            _LARGE.remove(large)  # any entry of the same value: each save only reads the last


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
        if self.filled == 0 and self.pos % ALIGN == 0 and _address(view) % ALIGN == 0:
            whole = len(view) - len(view) % ALIGN  # sent as it is: no copy into the stage
            self._put(view[:whole])
            view = view[whole:]
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
        self._put(self.stage[:nbytes])
        rest = self.filled - nbytes
        if rest:
            self.stage[:rest] = self.stage[nbytes : self.filled]
        self.filled = rest

    def _put(self, chunk: memoryview) -> None:
        """Write ``chunk`` (whole blocks, from page-aligned memory) at ``pos``: directly where the
        file system takes it."""
        if self.direct_fd >= 0 and len(chunk):
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
        self.pos += len(chunk)

    def _buffered(self, chunk: memoryview, offset: int) -> None:
        _write_all(self.fd, chunk, offset)


def _address(view: memoryview) -> int:
    """Where ``view``'s bytes start in memory; -1 if that cannot be known (read-only memory)."""
    if view.readonly or not len(view):
        return -1
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


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
