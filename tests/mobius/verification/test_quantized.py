"""The float weights of a quantized package, dequantized as onnxruntime's MatMulNBits reads them."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [False, True])
def test_dequantized_weights_are_what_matmulnbits_reads(bits, symmetric):
    """``quantized.dequantize`` gives the weight onnxruntime's MatMulNBits multiplies by (an
    identity input reads it back), K not a whole number of blocks."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from mobius.quant.blocks import Scheme, quantize
    from mobius.verification.quantized import dequantize

    n, k = 6, 80
    weight = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32)
    scheme = Scheme(bits, 32, symmetric)
    packed = quantize(weight, scheme)
    parts = {"B": packed.b, "scales": packed.scales}
    if packed.zero_points is not None:
        parts["zero_points"] = packed.zero_points
    node = helper.make_node(
        "MatMulNBits", ["A", *parts], ["Y"], domain="com.microsoft", K=k, N=n, bits=bits,
        block_size=32,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [k, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [k, n])],
        [numpy_helper.from_array(v, name) for name, v in parts.items()],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    read_back = session.run(None, {"A": np.eye(k, dtype=np.float32)})[0].T
    np.testing.assert_allclose(dequantize(packed, scheme, (n, k)), read_back, atol=1e-6)
