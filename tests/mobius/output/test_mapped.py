"""A checkpoint tensor's bytes mapped chunk by chunk: every byte once, in order, from any offset;
a file that ends inside the tensor is refused before anything is mapped."""

from __future__ import annotations

import os

import pytest

from mobius.errors import WeightsError
from mobius.output.mapped import mapped_chunks
from mobius.sources.safetensors_header import TensorEntry


@pytest.mark.parametrize("offset", [0, 8, 4096 + 12, 70_000])  # aligned or not to a page
@pytest.mark.parametrize("chunk", [4, 4096, 50_000])
def test_chunks_are_the_tensors_bytes_in_order(tmp_path, offset, chunk):
    data = os.urandom(offset + 100_000 + 16)
    path = tmp_path / "w.safetensors"
    path.write_bytes(data)
    entry = TensorEntry("w", path, "F32", (25_000,), offset)
    parts = [bytes(c) for c in mapped_chunks(entry, 100_000, chunk)]
    assert b"".join(parts) == data[offset : offset + 100_000]
    assert max(len(p) for p in parts) == min(chunk, 100_000)


def test_a_file_that_ends_inside_the_tensor_is_refused(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(bytes(1000))
    entry = TensorEntry("w", path, "F32", (300,), 8)
    with pytest.raises(WeightsError, match="ended inside tensor 'w'"):
        next(mapped_chunks(entry, 1200, 4096))
