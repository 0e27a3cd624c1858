"""``FusedMatMul(transB=1)`` by ``[out, in]`` weights: what the pass turns, what it leaves, and
that onnxruntime computes the same product."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from lowering.packed import _StackedRows
from lowering.transposed import TransposedTensor
from mobius.ep.stored_weights import use_stored_weights

RNG = np.random.default_rng(0)


def _model(transposed: list[TransposedTensor], shared: bool = False) -> ir.Model:
    """``y_i = x @ W_i^T`` for each tensor (one ``MatMul`` each, or two for one shared weight)."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3, 4]))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": 21}, name="g")
    for i, tensor in enumerate(transposed):
        weight = ir.Value(name=tensor.name, type=ir.TensorType(tensor.dtype), shape=tensor.shape)
        weight.const_value = tensor
        graph.register_initializer(weight)
        for j in range(2 if shared else 1):
            node = ir.node("MatMul", [x, weight], name=f"mm{i}_{j}")
            node.outputs[0].name = f"y{i}_{j}"
            graph.append(node)
            graph.outputs.append(node.outputs[0])
    return ir.Model(graph, ir_version=10)


def _source(name: str, rows: int = 5) -> ir.Tensor:
    return ir.tensor(RNG.standard_normal((rows, 4)).astype(np.float32), name=name)


def _run(model: ir.Model, x: np.ndarray) -> list[np.ndarray]:
    proto = ir.serde.serialize_model(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def test_matmul_by_a_transposed_weight_becomes_fused_matmul_by_the_source():
    source = _source("w")
    source.metadata_props["mobius.source_key"] = "w"
    tensor = TransposedTensor(source, name="w.T")
    tensor.metadata_props["mobius.transform"] = "transpose"
    model = _model([tensor])
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    before = _run(model, x)[0]
    assert use_stored_weights(model) == 1
    node = next(iter(model.graph))
    assert (node.op_type, node.domain, node.attributes["transB"].value) == (
        "FusedMatMul",
        "com.microsoft",
        1,
    )
    assert list(model.graph.initializers) == ["w"]
    assert model.graph.initializers["w"].const_value is source
    assert "mobius.transform" not in source.metadata_props
    np.testing.assert_allclose(_run(model, x)[0], before, atol=1e-6)
    np.testing.assert_array_equal(before, x @ source.numpy().T)


def test_shared_stacked_or_name_taken_weights_are_left_as_they_are():
    shared = TransposedTensor(_source("a"), name="a.T")  # read by two MatMuls
    stacked = TransposedTensor(_StackedRows([_source("b"), _source("c")]), name="bc.T")
    taken = TransposedTensor(_source("d"), name="d.T")
    model = _model([shared], shared=True)
    assert use_stored_weights(model) == 0
    model = _model([stacked, taken])
    other = ir.Value(name="d", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([5, 4]))
    other.const_value = _source("d")  # another tensor already holds the name
    model.graph.register_initializer(other)
    assert use_stored_weights(model) == 0
    assert [n.op_type for n in model.graph] == ["MatMul", "MatMul"]
