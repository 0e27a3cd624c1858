"""``mobius.ep.gqa``: the rotary tables a graph computes, evaluated once into GroupQueryAttention's
cos/sin caches, or refused where they depend on the sequence length."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from mobius.ep.gqa import rotary_caches


def _table_graph(length_dependent: bool) -> ir.Model:
    """cos/sin ``[1, seq, 2]`` of ``position_ids`` with inv_freq (1, 0.1); longrope-like when
    ``length_dependent``: the frequencies double once max(position_ids) + 1 exceeds 16."""
    nodes = [
        helper.make_node("Cast", ["position_ids"], ["p"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["p", "last"], ["p3"]),
        helper.make_node("Mul", ["p3", "inv_freq"], ["angles0"]),
        helper.make_node("ReduceMax", ["p"], ["longest"], keepdims=0),
        helper.make_node("Greater", ["longest", "limit"], ["long"]),
        helper.make_node("Where", ["long", "two", "one"], ["factor"]),
        helper.make_node("Mul", ["angles0", "factor" if length_dependent else "one"], ["angles"]),
        helper.make_node("Cos", ["angles"], ["cos"]),
        helper.make_node("Sin", ["angles"], ["sin"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
        numpy_helper.from_array(np.array([1.0, 0.1], np.float32), "inv_freq"),
        numpy_helper.from_array(np.array(15.0, np.float32), "limit"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
    ]
    graph = helper.make_graph(
        nodes,
        "tables",
        [helper.make_tensor_value_info("position_ids", onnx.TensorProto.INT64, [1, "s"])],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("cos", "sin")],
        inits,
    )
    return ir.serde.deserialize_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    )


def test_rotary_caches_are_the_graphs_tables_and_refuse_length_dependent_ones():
    """(longrope's switch on the sequence length, as a 9-node graph: GQA's fixed cache cannot hold it)"""
    model = _table_graph(length_dependent=False)
    cos, sin = model.graph.outputs
    cos_cache, sin_cache = rotary_caches(model.graph, model.opset_imports, cos, sin, 32)
    angles = np.arange(32)[:, None] * np.array([1.0, 0.1], np.float32)
    np.testing.assert_allclose(cos_cache, np.cos(angles), atol=1e-6)
    np.testing.assert_allclose(sin_cache, np.sin(angles), atol=1e-6)
    model = _table_graph(length_dependent=True)
    cos, sin = model.graph.outputs
    reason = rotary_caches(model.graph, model.opset_imports, cos, sin, 32)
    assert reason == "the rotary tables depend on the sequence length (longrope/dynamic scaling)"
