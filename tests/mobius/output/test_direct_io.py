"""mobius.output.direct_io: large tensors written past the page cache, byte for byte as a
buffered write."""

from __future__ import annotations

import errno
import fcntl
import os
import threading

import pytest

from mobius.output import direct_io

ALIGN = direct_io.ALIGN


@pytest.fixture(autouse=True)
def _small_thresholds(monkeypatch):
    # direct writes on (whatever the size of the save), a 2-block stage and no size floor: tests exercise every
    # path with a few KiB
    monkeypatch.setenv("MOBIUS_DIRECT_IO", "1")
    monkeypatch.setattr(direct_io, "MIN_BYTES", 1)
    monkeypatch.setattr(direct_io, "STAGE_BYTES", 2 * ALIGN)
    monkeypatch.setattr(direct_io, "_LOCAL", threading.local())
    monkeypatch.setattr(direct_io, "_REFUSED", set())
    yield
    direct_io.release()


def _direct_supported(directory) -> bool:
    probe = os.path.join(directory, "probe")
    open(probe, "wb").close()
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        os.unlink(probe)


def _write_tensors(path, tensors: list[tuple[int, bytes, list[int]]]) -> None:
    """Each tensor at its offset (some unaligned), fed to the writer in the given chunk sizes."""
    with open(path, "wb") as file:
        file.truncate(max(offset + len(data) for offset, data, _ in tensors))
        for offset, data, chunks in tensors:
            file.seek(offset)
            with direct_io.writer(file, len(data)) as out:
                start = 0
                for size in chunks:
                    out.write(data[start : start + size])
                    start += size
                out.write(data[start:])
            assert file.tell() == offset + len(data)  # left after the tensor, as file.write would


LAYOUT = [  # (offset, length, chunk sizes): heads, tails, a chunk across the stage's end
    (0, 3 * ALIGN + 100, [10, 2 * ALIGN + 5]),
    (3 * ALIGN + 100, 5 * ALIGN + 17, [ALIGN - 100, 3 * ALIGN]),
    (8 * ALIGN + 117, 50, []),  # smaller than a block: all buffered
    (8 * ALIGN + 167, ALIGN - 167 + 2 * ALIGN, [1, 1, 7 * ALIGN]),  # ends on a block boundary
]


def _layout_bytes() -> list[tuple[int, bytes, list[int]]]:
    return [(offset, os.urandom(length), chunks) for offset, length, chunks in LAYOUT]


def test_bytes_are_those_of_a_buffered_write(tmp_path, monkeypatch):
    tensors = _layout_bytes()
    direct_path, plain_path = tmp_path / "direct.data", tmp_path / "plain.data"
    direct_writes = []
    real = direct_io._write_all

    def recording(fd, chunk, offset):
        direct_writes.append(bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT))
        real(fd, chunk, offset)

    monkeypatch.setattr(direct_io, "_write_all", recording)
    _write_tensors(str(direct_path), tensors)
    expected = bytearray(max(offset + len(data) for offset, data, _ in tensors))
    for offset, data, _ in tensors:
        expected[offset : offset + len(data)] = data
    assert direct_path.read_bytes() == bytes(expected)
    if _direct_supported(tmp_path):  # /tmp on the CI machine is ext4: the direct path ran
        assert any(direct_writes) and not all(direct_writes)  # heads and tails stay buffered
    monkeypatch.setenv("MOBIUS_DIRECT_IO", "0")
    _write_tensors(str(plain_path), tensors)
    assert plain_path.read_bytes() == direct_path.read_bytes()


def test_a_save_past_the_dirty_threshold_writes_directly_unless_told(monkeypatch):
    monkeypatch.delenv("MOBIUS_DIRECT_IO")
    monkeypatch.setattr(direct_io, "dirty_background_bytes", lambda: 1000.0)
    has_direct = hasattr(os, "O_DIRECT")
    assert not direct_io.enabled()  # no save running
    with direct_io.large_save(1000):
        assert not direct_io.enabled()  # within the threshold: buffered
    with direct_io.large_save(1001):
        assert direct_io.enabled() == has_direct
        monkeypatch.setenv("MOBIUS_DIRECT_IO", "0")
        assert not direct_io.enabled()
    assert not direct_io._LARGE
    with direct_io.large_save(10):
        monkeypatch.setenv("MOBIUS_DIRECT_IO", "1")
        assert direct_io.enabled() == has_direct


def test_the_dirty_threshold_is_the_kernels():
    threshold = direct_io.dirty_background_bytes()
    if not os.path.exists("/proc/sys/vm/dirty_background_ratio"):
        assert threshold == float("inf")
        return
    fixed = int(open("/proc/sys/vm/dirty_background_bytes").read())
    ratio = int(open("/proc/sys/vm/dirty_background_ratio").read())
    if fixed:
        assert threshold == fixed
    else:  # a share of available memory: below all of it, above nothing
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        assert 0 < threshold <= ratio / 100 * total


def test_a_file_system_that_refuses_o_direct_gets_buffered_writes(tmp_path, monkeypatch):
    real_open = os.open

    def refusing_open(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    tensors = _layout_bytes()
    _write_tensors(str(tmp_path / "a.data"), tensors)
    assert str(tmp_path / "a.data") in direct_io._REFUSED
    for offset, data, _ in tensors:
        assert (tmp_path / "a.data").read_bytes()[offset : offset + len(data)] == data


def test_a_refused_direct_write_is_redone_buffered(tmp_path, monkeypatch):
    # the file system took the O_DIRECT open but refuses the write (EINVAL): a plain descriptor
    # stands in for the direct one, so this runs on any file system
    path = tmp_path / "b.data"
    real_open, stand_ins = os.open, set()

    def plain_open(name, flags, *args):
        fd = real_open(name, flags & ~os.O_DIRECT, *args)
        if flags & os.O_DIRECT:
            stand_ins.add(fd)
        return fd

    real = direct_io._write_all
    refused = []

    def refusing_direct(fd, chunk, offset):
        if fd in stand_ins:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        real(fd, chunk, offset)

    monkeypatch.setattr(os, "open", plain_open)
    monkeypatch.setattr(direct_io, "_write_all", refusing_direct)
    tensors = _layout_bytes()
    _write_tensors(str(path), tensors)
    assert refused and str(path) in direct_io._REFUSED
    for offset, data, _ in tensors:
        assert path.read_bytes()[offset : offset + len(data)] == data


def test_in_memory_files_and_small_tensors_are_written_plainly(monkeypatch):
    import io

    monkeypatch.setattr(os, "open", None)  # no descriptor may be opened
    buffer = io.BytesIO()
    with direct_io.writer(buffer, 10) as out:
        out.write(b"0123456789")
    assert buffer.getvalue() == b"0123456789"


def test_a_failure_inside_a_tensor_leaves_the_next_writer_working(tmp_path):
    path = str(tmp_path / "c.data")
    with open(path, "wb") as file:
        with (
            pytest.raises(RuntimeError, match="cast failed"),
            direct_io.writer(file, 3 * ALIGN) as out,
        ):
            out.write(b"x" * (ALIGN + 3))
            raise RuntimeError("cast failed")
        file.seek(0)
        data = os.urandom(3 * ALIGN)
        with direct_io.writer(file, len(data)) as out:
            out.write(data)
    with open(path, "rb") as file:
        assert file.read(len(data)) == data


def test_page_aligned_bytes_at_a_block_boundary_are_sent_without_staging(tmp_path, monkeypatch):
    """A cast chunk in the writer's (page-aligned) scratch memory goes to the device from where
    it is; its unaligned tail and a chunk that follows it are staged as before."""
    import mmap

    source = mmap.mmap(-1, 3 * ALIGN)
    source[:] = os.urandom(3 * ALIGN)
    tail = os.urandom(100)
    sent: list[int] = []
    real = direct_io._write_all

    def recording(fd, chunk, offset):
        sent.append(direct_io._address(chunk))
        real(fd, chunk, offset)

    monkeypatch.setattr(direct_io, "_write_all", recording)
    path = tmp_path / "d.data"
    with open(path, "wb") as file:
        file.seek(ALIGN)
        with direct_io.writer(file, 3 * ALIGN + 100) as out:
            out.write(memoryview(source)[: 2 * ALIGN + 50])  # 2 blocks sent, 50 bytes staged
            out.write(tail)
            out.write(memoryview(source)[2 * ALIGN + 50 :])
    data = bytes(source)
    assert (
        path.read_bytes() == bytes(ALIGN) + data[: 2 * ALIGN + 50] + tail + data[2 * ALIGN + 50 :]
    )
    assert sent[0] == direct_io._address(memoryview(source))  # no copy: the source itself
    assert direct_io._address(memoryview(b"read-only")) == -1
