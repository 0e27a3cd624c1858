"""``mobius.quant.nbits_pack.fuse_biases``: a bias ``Add`` after MatMulNBits becomes its ``bias``
input (Qwen2's packed q/k/v bias), with the values onnxruntime computed before."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from mobius.quant.nbits_pack import BIAS_INPUT, fuse_biases
from mobius.testing.graphs import initializer_value

MS = "com.microsoft"
N, K, BLOCK = 24, 64, 32


def _model(rng: np.random.Generator, bias_shape: tuple[int, ...]) -> ir.Model:
    """``y = MatMulNBits(x) + b`` (4 bits, uint8 zero points), ``y`` a graph output."""
    kb = K // BLOCK
    codes = rng.integers(0, 16, (N, kb, BLOCK)).astype(np.uint8)
    zero = rng.integers(0, 16, (N, kb)).astype(np.uint8)
    parts = [
        initializer_value("W.b", codes[..., 0::2] | (codes[..., 1::2] << 4)),
        initializer_value("W.scales", rng.uniform(0.01, 0.1, N * kb).astype(np.float32)),
        initializer_value("W.zero_points", (zero[:, 0::2] | (zero[:, 1::2] << 4)).reshape(-1)),
    ]
    bias = initializer_value("b", rng.standard_normal(bias_shape).astype(np.float32))
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3, K]))
    attributes = {"K": K, "N": N, "bits": 4, "block_size": BLOCK, "accuracy_level": 0}
    matmul = ir.Node(MS, "MatMulNBits", [x, *parts], [ir.AttrInt64(*a) for a in attributes.items()])
    add = ir.Node("", "Add", [matmul.outputs[0], bias])
    add.outputs[0].name, add.outputs[0].type = "y", ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph(
        [x],
        [add.outputs[0]],
        nodes=[matmul, add],
        initializers=[*parts, bias],
        opset_imports={"": 21, MS: 1},
    )
    return ir.Model(graph, ir_version=10)


def _run(model: ir.Model, x: np.ndarray) -> np.ndarray:
    proto = ir.to_proto(model).SerializeToString()
    session = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_bias_add_becomes_the_bias_input():
    rng = np.random.default_rng(0)
    model = _model(rng, (N,))
    x = rng.standard_normal((2, 3, K)).astype(np.float32)
    expected = _run(model, x)
    assert fuse_biases(model) == 1
    (node,) = model.graph
    assert node.op_type == "MatMulNBits" and node.inputs[BIAS_INPUT].name == "b"
    assert node.outputs[0].name == "y" and model.graph.outputs[0] is node.outputs[0]
    np.testing.assert_allclose(_run(model, x), expected, rtol=1e-6, atol=1e-6)


def test_an_add_that_is_not_a_bias_stays():
    """A ``[1, N]`` addend broadcasts like a bias but is not MatMulNBits' ``[N]`` bias input."""
    model = _model(np.random.default_rng(1), (1, N))
    assert fuse_biases(model) == 0 and [n.op_type for n in model.graph] == ["MatMulNBits", "Add"]
