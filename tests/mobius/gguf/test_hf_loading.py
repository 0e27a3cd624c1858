"""``fast_gguf_loading``: gguf's reader and name table give what the originals give, and the
originals are back once the last user leaves (nested and concurrent users share the patches)."""

from __future__ import annotations

import threading

import gguf
import numpy as np

from mobius.gguf.hf_loading import fast_gguf_loading
from mobius.testing.gguf_files import write_tiny_llama


def _fields(reader) -> dict[str, list]:
    return {name: [part.tolist() for part in f.parts] for name, f in reader.fields.items()}


def test_plain_array_reader_reads_what_the_memmap_reader_reads(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    expected = gguf.GGUFReader(path)
    with fast_gguf_loading():
        reader = gguf.GGUFReader(path)
        assert type(reader) is not type(expected)
    assert not isinstance(reader.data, np.memmap)
    assert _fields(reader) == _fields(expected)
    assert [t.name for t in reader.tensors] == [t.name for t in expected.tensors]
    for got, want in zip(reader.tensors, expected.tensors, strict=True):
        np.testing.assert_array_equal(got.data, want.data)


def test_name_table_is_built_once_per_architecture_and_block_count():
    arch = gguf.MODEL_ARCH.LLAMA
    original = gguf.get_tensor_name_map
    with fast_gguf_loading():
        first = gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 2) is first
        assert gguf.get_tensor_name_map(arch, 3) is not first
    assert gguf.get_tensor_name_map is original
    assert original(arch, 2).mapping == first.mapping


def test_originals_return_after_the_last_of_several_users():
    originals = (gguf.GGUFReader, gguf.get_tensor_name_map)
    inside, leave = threading.Event(), threading.Event()

    def other_build() -> None:
        with fast_gguf_loading():
            inside.set()
            leave.wait(timeout=30)

    thread = threading.Thread(target=other_build)
    thread.start()
    assert inside.wait(timeout=30)
    with fast_gguf_loading():
        with fast_gguf_loading():  # nested
            patched = gguf.GGUFReader
    assert gguf.GGUFReader is patched  # the other build is still inside
    leave.set()
    thread.join(timeout=30)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == originals
