"""mobius.output.weights: the non-finite check and the byte-copy path for checkpoint tensors."""

from __future__ import annotations

import io

import pytest
import torch
from safetensors.torch import save_file

from mobius.output.saving import NONFINITE
from mobius.output.weights import (
    Checkpoint,
    CopiedTensor,
    _all_finite,
    _cast_halves,
    _finite,
    lazy_initializer,
)
from mobius.sources.safetensors_header import read_header


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_all_finite_finds_nan_and_inf_anywhere(dtype):
    data = torch.randn(3, 1000).to(dtype)
    assert _all_finite(data)
    for bad in (float("nan"), float("inf"), float("-inf")):
        for index in (0, 1234, 2999):
            poisoned = data.clone().reshape(-1)
            poisoned[index] = bad
            assert not _all_finite(poisoned.reshape(3, 1000), chunk=100)


def test_all_finite_when_the_sum_overflows_but_every_value_is_finite():
    big = torch.full((8,), torch.finfo(torch.float16).max, dtype=torch.float16)
    assert not bool(torch.isfinite(big.sum()))  # the fast path cannot decide: falls back
    assert _all_finite(big, chunk=3)
    big[5] = float("inf")
    assert not _all_finite(big, chunk=3)


def test_all_finite_on_empty_and_scalar():
    assert _all_finite(torch.empty(0))
    assert _all_finite(torch.tensor(1.5))
    assert not _all_finite(torch.tensor(float("nan")))


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "bfloat16"])
def test_numpy_finite_finds_nan_and_inf_anywhere(dtype):
    """The numpy check (bytes written as stored, no torch): bfloat16 by its exponent bits."""
    import ml_dtypes
    import numpy as np

    numpy_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    data = np.random.default_rng(0).standard_normal((3, 1000)).astype(numpy_dtype)
    assert _finite(data)
    for bad in (float("nan"), float("inf"), float("-inf")):
        for index in (0, 1234, 2999):
            poisoned = data.copy().reshape(-1)
            poisoned[index] = bad
            assert not _finite(poisoned.reshape(3, 1000), chunk=100)
    big = np.full(8, np.finfo(np.float16).max, dtype=np.float16)  # the sum overflows
    assert _finite(big, chunk=3)


def _saved_bytes(tensor) -> bytes:
    buffer = io.BytesIO()
    tensor.tofile(buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_checkpoint_tensor_is_copied_byte_for_byte(tmp_path, dtype, monkeypatch):
    tensors = {
        "a": torch.randn(3, 5).to(dtype),
        "b": (torch.randn(37, 11) * 100).to(dtype),
        "c": torch.randn(0, 4).to(dtype),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    entries = read_header(path)
    checkpoint = Checkpoint(entries)
    monkeypatch.setattr(CopiedTensor, "CHUNK", 64)  # many chunks, some not a row long
    for key, expected in tensors.items():
        value = lazy_initializer(
            key,
            dtype,
            tuple(expected.shape),
            lambda k=key: checkpoint.load(k),
            copy_from=entries[key],
        )
        assert isinstance(value.const_value, CopiedTensor)
        assert (
            _saved_bytes(value.const_value)
            == expected.contiguous().view(torch.uint8).numpy().tobytes()
        )
        assert (
            _saved_bytes(value.const_value) == value.const_value.tobytes()
        )  # the tensor path agrees


def test_copied_tensor_reports_nonfinite_values(tmp_path, monkeypatch):
    data = torch.randn(40, 8)
    data[33, 2] = float("nan")
    path = tmp_path / "model.safetensors"
    save_file({"w": data, "ok": torch.randn(40, 8)}, str(path))
    entries = read_header(path)
    monkeypatch.setattr(CopiedTensor, "CHUNK", 128)
    sink: list[str] = []
    token = NONFINITE.set(sink)
    try:
        for key in ("w", "ok"):
            value = lazy_initializer(
                key, torch.float32, (40, 8), lambda: None, copy_from=entries[key]
            )
            _saved_bytes(value.const_value)
    finally:
        NONFINITE.reset(token)
    assert sink == ["w"]


@pytest.mark.parametrize(
    ("stored", "wanted"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float16),
        (torch.float32, torch.float16),
    ],
)
def test_a_cast_tensor_is_streamed_chunk_by_chunk(tmp_path, monkeypatch, stored, wanted):
    data = torch.randn(37, 11).to(stored)
    path = tmp_path / "model.safetensors"
    save_file({"w": data}, str(path))
    entries = read_header(path)
    monkeypatch.setattr(CopiedTensor, "CHUNK", 64)  # many chunks, whole elements each
    value = lazy_initializer(
        "w", wanted, (37, 11), lambda: Checkpoint(entries).load("w"), copy_from=entries["w"]
    )
    tensor = value.const_value
    assert isinstance(tensor, CopiedTensor) and tensor.entry is None  # not the file's bytes
    expected = data.to(wanted).view(torch.uint8).numpy().tobytes()
    assert _saved_bytes(tensor) == expected == tensor.tobytes()
    assert tensor.numpy().dtype == torch.empty((), dtype=wanted).numpy().dtype


def test_bf16_to_f16_through_float32_blocks_gives_the_direct_casts_bits(monkeypatch):
    import mobius.output.weights as weights

    monkeypatch.setattr(weights, "HALF_CAST_BLOCK", 1000)  # many blocks, the last one partial
    every_bf16 = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)
    source = every_bf16.view(torch.bfloat16)  # NaN, Inf, subnormals and overflow included
    out = torch.empty(source.shape, dtype=torch.float16)
    _cast_halves(source, out)
    assert torch.equal(out.view(torch.int16), source.to(torch.float16).view(torch.int16))


def test_a_cast_that_overflows_is_reported(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.full((3, 3), 1e6, dtype=torch.bfloat16)}, str(path))  # > f16's max
    entries = read_header(path)
    sink: list[str] = []
    token = NONFINITE.set(sink)
    try:
        value = lazy_initializer("w", torch.float16, (3, 3), lambda: None, copy_from=entries["w"])
        _saved_bytes(value.const_value)
    finally:
        NONFINITE.reset(token)
    assert sink == ["w"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.bool])
def test_checkpoint_load_reads_what_safetensors_reads(tmp_path, dtype):
    tensors = {
        "a": torch.randn(5, 7).to(dtype),
        "s": torch.tensor(3).to(dtype),
        "e": torch.ones(0, 2),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    checkpoint = Checkpoint(read_header(path))
    for key, expected in tensors.items():
        loaded = checkpoint.load(key)
        assert loaded.dtype == expected.dtype and loaded.shape == expected.shape
        assert torch.equal(loaded, expected)
        assert torch.equal(checkpoint._load_mapped(key), expected)


@pytest.mark.parametrize(
    ("stored", "wanted"),
    [(torch.bfloat16, torch.float16), (torch.float32,) * 2, (torch.bfloat16,) * 2],
)
def test_a_linear_weight_is_cast_and_transposed_in_one_pass(tmp_path, monkeypatch, stored, wanted):
    from lowering.transposed import TransposedTensor

    data = torch.randn(37, 11).to(stored)
    data[30, 7] = 1e6  # beyond float16: reported after the cast
    if stored == wanted:  # written as stored, by numpy: a NaN is reported all the same
        data[3, 2] = float("nan")
    path = tmp_path / "model.safetensors"
    save_file({"w": data}, str(path))
    entries = read_header(path)
    monkeypatch.setattr(CopiedTensor, "SLAB_COLUMNS", 4)  # slabs and blocks that do not divide
    monkeypatch.setattr(CopiedTensor, "BLOCK_ROWS", 8)
    value = lazy_initializer(
        "w", wanted, (37, 11), lambda: Checkpoint(entries).load("w"), copy_from=entries["w"]
    )
    sink: list[str] = []
    token = NONFINITE.set(sink)
    try:
        written = _saved_bytes(TransposedTensor(value.const_value, name="w.T"))
    finally:
        NONFINITE.reset(token)
    assert written == data.to(wanted).t().contiguous().view(torch.uint8).numpy().tobytes()
    assert sink == ["w"]
