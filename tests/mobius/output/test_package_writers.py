"""Weights written by several threads (direct or buffered): the same bytes as one, NaN/Inf still
reported, and one thread wherever an initializer may share state with another (``writers_for``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch
from onnx import numpy_helper
from safetensors.torch import save_file

import mobius.output.direct_io
import mobius.output.package
from lowering.transposed import TransposedTensor
from mobius.output.package import ModelPackage, spread_packings, writers_for
from mobius.output.weights import Checkpoint, lazy_initializer
from mobius.quant.blocks import LazyPacking
from mobius.sources.safetensors_header import read_header


def _model(tmp_path) -> ir.Model:
    """A graph that adds up a dozen checkpoint tensors (bf16 -> f16, some transposed, one with
    an Inf) and one in-memory constant."""
    torch.manual_seed(0)
    tensors = {f"w{i}": torch.randn(40 + i, 24 + 3 * i).to(torch.bfloat16) for i in range(12)}
    tensors["w5"][3, 7] = float("inf")
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    entries = read_header(path)
    checkpoint = Checkpoint(entries)
    values = []
    for key, data in tensors.items():
        value = lazy_initializer(
            key,
            torch.float16,
            tuple(data.shape),
            lambda k=key: checkpoint.load(k),
            copy_from=entries[key],
        )
        if key in ("w2", "w7", "w9"):
            rows, cols = data.shape
            value = ir.Value(
                name=f"{key}.T",
                type=ir.TensorType(ir.DataType.FLOAT16),
                shape=ir.Shape([cols, rows]),
                const_value=TransposedTensor(value.const_value, f"{key}.T"),
            )
        values.append(value)
    constant = ir.tensor(torch.arange(6, dtype=torch.float16).numpy(), name="c")
    values.append(ir.Value(name="c", type=ir.TensorType(ir.DataType.FLOAT16), const_value=constant))
    outputs = []
    for value in values:
        node = ir.node("ReduceSum", [value], attributes={"keepdims": 0})
        outputs.append(node.outputs[0])
    total = ir.node("Sum", outputs)
    total.outputs[0].name = "total"
    graph = ir.Graph(
        [],
        [total.outputs[0]],
        nodes=[*(o.producer() for o in outputs), total],
        initializers=values,
        opset_imports={"": 18},
    )
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("direct", ["1", "0"])
def test_several_writers_write_the_bytes_of_one_and_report_nonfinite(tmp_path, monkeypatch, direct):
    monkeypatch.setenv("MOBIUS_DIRECT_IO", direct)
    monkeypatch.setattr(mobius.output.direct_io, "MIN_BYTES", 1)  # the small weights go direct too
    model = _model(tmp_path)
    assert writers_for(model) == (3 if direct == "1" else 2)
    monkeypatch.setattr(mobius.output.package, "WRITERS", 1)
    monkeypatch.setattr(mobius.output.package, "DIRECT_WRITERS", 1)
    one = ModelPackage(model=model)
    one.save(tmp_path / "one")
    monkeypatch.setattr(mobius.output.package, "WRITERS", 2)
    monkeypatch.setattr(mobius.output.package, "DIRECT_WRITERS", 3)
    several = ModelPackage(model=_model(tmp_path))
    several.save(tmp_path / "several")
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "several" / name).read_bytes()
    assert one.nonfinite == several.nonfinite == ["w5"]


def test_an_initializer_that_may_share_state_keeps_one_writer(tmp_path):
    model = _model(tmp_path)
    shared = ir.LazyTensor(lambda: ir.tensor([1.0]), dtype=ir.DataType.FLOAT, shape=ir.Shape([1]))
    model.graph.initializers["shared"] = ir.Value(
        name="shared", type=ir.TensorType(ir.DataType.FLOAT), const_value=shared
    )
    assert writers_for(model) == 1


class _CountingPacking(LazyPacking):
    """Three parts of one weight, made together; counts how often they are made."""

    def __init__(self, seed: int, made: list[int]) -> None:
        super().__init__()
        self.seed, self.made = seed, made

    def _pack(self) -> None:
        self.made.append(self.seed)
        rng = np.random.default_rng(self.seed)
        self.pending = {
            "b": rng.integers(0, 255, (64, 2, 16), dtype=np.uint8),
            "scales": rng.standard_normal(128).astype(np.float32),
            "zero_points": rng.integers(0, 255, 64, dtype=np.uint8),
        }


def _packed_model(made: list[int]) -> ir.Model:
    """Four packed weights (B, scales, zero points each, side by side) and a plain constant."""
    shapes = {"b": (ir.DataType.UINT8, [64, 2, 16]), "scales": (ir.DataType.FLOAT, [128])}
    shapes["zero_points"] = (ir.DataType.UINT8, [64])
    values = [ir.Value(name="c", const_value=ir.tensor(np.arange(6, dtype=np.float32), name="c"))]
    for weight in range(4):
        packing = _CountingPacking(weight, made)
        for part, (dtype, shape) in shapes.items():
            name = f"w{weight}.{part}"
            tensor = packing.part(part, name, dtype, shape)
            values.append(ir.Value(name=name, type=ir.TensorType(dtype), const_value=tensor))
    nodes = [ir.node("Identity", [v]) for v in values]
    graph = ir.Graph(
        [], [n.outputs[0] for n in nodes], nodes=nodes, initializers=values, opset_imports={"": 18}
    )
    return ir.Model(graph, ir_version=10)


def test_packed_parts_are_written_by_several_threads_each_weight_packed_once(tmp_path):
    made: list[int] = []
    model = _packed_model(made)
    assert writers_for(model) == (3 if mobius.output.direct_io.enabled() else 2)
    spread_packings(model.graph, 3)  # three weights at a time, part by part
    assert list(model.graph.initializers)[:10] == [
        "c", "w0.b", "w1.b", "w0.scales", "w1.scales", "w0.zero_points", "w1.zero_points",
        "w2.b", "w3.b", "w2.scales",
    ]  # fmt: skip
    ModelPackage(model=_packed_model(made)).save(tmp_path / "several")
    assert sorted(made) == [0, 1, 2, 3]  # each weight packed once
    several = onnx.load(tmp_path / "several" / "model.onnx")
    made.clear()
    one_model = _packed_model(made)
    for value in one_model.graph.initializers.values():  # the plain, one-thread path
        value.const_value = ir.tensor(value.const_value.numpy(), name=value.name)
    ModelPackage(model=one_model).save(tmp_path / "one")
    one = onnx.load(tmp_path / "one" / "model.onnx")
    arrays = {t.name: numpy_helper.to_array(t) for t in one.graph.initializer}
    assert len(several.graph.initializer) == len(arrays) == 13
    for tensor in several.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(tensor), arrays[tensor.name])
