"""The CPU forms of MatMulNBits (``mobius.quant.nbits_cpu``): same values as the form they replace,
run by onnxruntime before and after the rewrite on random codes, scales and zero points."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius.quant.nbits_cpu import OFFSET_4BIT, SPLIT_8BIT, fast_cpu_forms
from mobius.testing.graphs import initializer_value

MS = "com.microsoft"
N, K, BLOCK, VOCAB = 40, 96, 32, 40


def _nibbles(values: np.ndarray) -> np.ndarray:
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def _model(
    bits: int, float_zero_points: bool, rng: np.random.Generator, bias: bool = False
) -> ir.Model:
    """``logits = hidden @ W^T (+ b)`` by MatMulNBits and ``embedded = W[ids]`` by
    GatherBlockQuantized over the same bytes (a tied embedding), as mobius emits them."""
    kb = K // BLOCK
    codes = rng.integers(0, 2**bits, (N, kb, BLOCK)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, N * kb).astype(np.float32)
    if float_zero_points:
        zero = rng.uniform(0, 15, N * kb).astype(np.float32)
    else:
        zero = rng.integers(0, 2**bits, (N, kb)).astype(np.uint8)
        zero = (zero if bits == 8 else _nibbles(zero)).reshape(-1)
    parts = [
        initializer_value("W.b", codes if bits == 8 else _nibbles(codes)),
        initializer_value("W.scales", scales),
        initializer_value("W.zero_points", zero),
    ]
    hidden = ir.Value(
        name="hidden", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3, K])
    )
    ids = ir.Value(name="ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([2, 3]))
    common = [ir.AttrInt64("block_size", BLOCK), ir.AttrInt64("bits", bits)]
    biases = (
        [initializer_value("W.bias", rng.standard_normal(N).astype(np.float32))] if bias else []
    )
    matmul = ir.Node(
        MS,
        "MatMulNBits",
        [hidden, *parts, *([None, *biases] if bias else [])],
        attributes=[
            *common,
            ir.AttrInt64("K", K),
            ir.AttrInt64("N", N),
            ir.AttrInt64("accuracy_level", 0),
        ],
        name="lm_head",
    )
    nodes, outputs = [matmul], [matmul.outputs[0]]
    initializers = [*parts, *biases]
    if not float_zero_points:  # GatherBlockQuantized takes no float zero points
        rows = initializer_value("rows", np.array([N, -1], dtype=np.int64))
        initializers.append(rows)
        flat = [ir.Node("", "Reshape", [p, rows], name=f"{p.name}.rows") for p in parts]
        gather = ir.Node(
            MS,
            "GatherBlockQuantized",
            [flat[0].outputs[0], ids, flat[1].outputs[0], flat[2].outputs[0]],
            attributes=[*common, ir.AttrInt64("gather_axis", 0), ir.AttrInt64("quantize_axis", 1)],
            name="embed",
        )
        nodes += [*flat, gather]
        outputs.append(gather.outputs[0])
    for i, value in enumerate(outputs):
        value.name, value.type = f"out{i}", ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph(
        [hidden, ids],
        outputs,
        nodes=nodes,
        initializers=initializers,
        opset_imports={"": 21, MS: 1},
    )
    return ir.Model(graph, ir_version=10)


def _exact_logits(model: ir.Model, hidden: np.ndarray) -> np.ndarray:
    """``hidden @ W^T (+ b)`` in float64 from the MatMulNBits node's own codes, scales, zero
    points (and bias), before any rewrite: the value both forms round."""
    init = {name: v.const_value.numpy() for name, v in model.graph.initializers.items()}
    codes = init["W.b"]
    if codes.shape[-1] * 2 == BLOCK:  # 4 bits, two per byte, low nibble first
        codes = np.stack([codes & 15, codes >> 4], axis=-1).reshape(*codes.shape[:-1], BLOCK)
    zero = init["W.zero_points"]
    if zero.dtype == np.uint8 and zero.size * 2 == N * (K // BLOCK):
        zero = np.stack([zero & 15, zero >> 4], axis=-1)
    zero = zero.astype(np.float64).reshape(N, -1, 1)
    scales = init["W.scales"].astype(np.float64).reshape(N, -1, 1)
    weight = ((codes - zero) * scales).reshape(N, K)
    return hidden.astype(np.float64) @ weight.T + init.get("W.bias", 0.0)


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(
        ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


@pytest.mark.parametrize(
    ("bits", "float_zero_points", "form", "kernels", "bias"),
    [
        (8, False, SPLIT_8BIT, 2, False),
        (4, True, OFFSET_4BIT, 1, False),
        (8, False, SPLIT_8BIT, 2, True),
        (4, True, OFFSET_4BIT, 1, True),
    ],
    ids=["8-bit", "4-bit-float-zero-points", "8-bit-bias", "4-bit-float-zero-points-bias"],
)
def test_cpu_form_computes_the_same_values(bits, float_zero_points, form, kernels, bias):
    """With a bias input (``nbits_pack.fuse_biases``), one of the new MatMulNBits adds it."""
    rng = np.random.default_rng(bits)
    model = _model(bits, float_zero_points, rng, bias)
    feeds = {
        "hidden": rng.standard_normal((2, 3, K)).astype(np.float32),
        "ids": rng.integers(0, VOCAB, (2, 3)).astype(np.int64),
    }
    expected = _run(model, feeds)
    exact = _exact_logits(model, feeds["hidden"])
    assert fast_cpu_forms(model) == {"W.b": form}
    ops = [(n.op_type, n.attributes.get_int("bits", 0)) for n in model.graph]
    assert ops.count(("MatMulNBits", 4)) == kernels and ("MatMulNBits", 8) not in ops
    assert not any(op == ("GatherBlockQuantized", 8) for op in ops)
    with_bias = [n for n in model.graph if n.op_type == "MatMulNBits" and len(n.inputs) == 6]
    assert len(with_bias) == int(bias)
    actual = _run(model, feeds)
    # the products against their exact value (two float32 roundings of it can differ by more
    # than 1e-5 where a logit cancels out), the lookups against the old lookups
    np.testing.assert_allclose(expected[0], exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(actual[0], exact, rtol=1e-5, atol=1e-5)
    for want, got in zip(expected[1:], actual[1:], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the bytes are stored once: the old 8-bit parts (or float zero points) are gone
    assert "W.zero_points" not in model.graph.initializers


def test_accuracy_level_four_keeps_8_bits():
    """The int8 kernel (accuracy_level 4) is fast already; its node is left as it is."""
    model = _model(8, False, np.random.default_rng(0))
    for node in model.graph:
        if node.op_type == "MatMulNBits":
            node.attributes["accuracy_level"] = ir.AttrInt64("accuracy_level", 4)
    assert fast_cpu_forms(model) == {}
