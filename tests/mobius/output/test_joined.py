"""mobius.output.joined: initializers joined from several others when saved."""

from __future__ import annotations

import io

import numpy as np
import onnx_ir as ir
import torch
from safetensors.torch import save_file

from mobius.output.joined import JoinedTensor
from mobius.output.weights import Checkpoint, CopiedTensor, lazy_initializer
from mobius.sources.safetensors_header import read_header


def _parts(tmp_path, monkeypatch) -> tuple[list[ir.TensorProtocol], list[torch.Tensor]]:
    """Three bf16 checkpoint tensors of one width, read as f16 (streamed, cast on the way)."""
    tensors = {
        "q": torch.randn(8, 5).to(torch.bfloat16),
        "k": torch.randn(3, 5).to(torch.bfloat16),
        "v": torch.randn(3, 5).to(torch.bfloat16),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    entries = read_header(path)
    monkeypatch.setattr(CopiedTensor, "CHUNK", 16)  # several chunks per part
    parts = [
        lazy_initializer(
            key, torch.float16, (rows, 5), lambda k=key: Checkpoint(entries).load(k),
            copy_from=entries[key],
        ).const_value
        for key, rows in (("q", 8), ("k", 3), ("v", 3))
    ]  # fmt: skip
    assert all(isinstance(part, CopiedTensor) for part in parts)
    return parts, [t.to(torch.float16) for t in tensors.values()]


def _written(tensor: ir.TensorProtocol) -> bytes:
    buffer = io.BytesIO()
    tensor.tofile(buffer)
    return buffer.getvalue()


def test_parts_joined_along_the_first_axis_stream_themselves(tmp_path, monkeypatch):
    parts, expected = _parts(tmp_path, monkeypatch)
    joined = JoinedTensor(parts, 0, "qkv", ir.DataType.FLOAT16, [14, 5])

    def never(self):
        raise AssertionError("joined in memory")

    monkeypatch.setattr(JoinedTensor, "_join", never)
    assert _written(joined) == torch.cat(expected).numpy().tobytes()


def test_parts_joined_along_another_axis_are_joined_first(tmp_path, monkeypatch):
    parts, expected = _parts(tmp_path, monkeypatch)
    columns = [
        ir.tensor(np.ascontiguousarray(part.numpy().T), name=f"t{i}")
        for i, part in enumerate(parts)
    ]
    joined = JoinedTensor(columns, 1, "qkv", ir.DataType.FLOAT16, [5, 14])
    assert _written(joined) == torch.cat(expected).T.contiguous().numpy().tobytes()


def test_parts_of_less_than_a_byte_are_joined_first():
    """Two 3-element UINT4 parts would each end in half a byte: joined, they share one."""
    parts = [ir.tensor(np.array([1, 2, 3], np.uint8), dtype=ir.DataType.UINT4) for _ in range(2)]
    joined = JoinedTensor(parts, 0, "j", ir.DataType.UINT4, [6])
    assert len(_written(joined)) == 3
    assert _written(joined) == joined.tobytes()
