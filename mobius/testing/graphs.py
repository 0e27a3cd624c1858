"""Graphs in tests: which ONNX ops each layer of a saved graph became; initializers for graphs
built by hand."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir


def ops_by_layer(directory: Path, layer_pattern: str) -> dict[str, collections.Counter]:
    """Op counts per layer of ``directory/model.onnx``, keyed by the part of each node's namespace
    that ``layer_pattern`` matches (``model.layers.3``); nodes outside any layer go to "model"."""
    model = onnx.load(str(Path(directory) / "model.onnx"), load_external_data=False)
    layers: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for node in model.graph.node:
        scope = {p.key: p.value for p in node.metadata_props}.get("namespace", "")
        found = re.search(layer_pattern, scope)
        layers[found.group(0) if found else "model"][node.op_type] += 1
    return layers


def initializer_value(name: str, array: np.ndarray) -> ir.Value:
    """A graph value holding ``array`` (for a hand-built ``ir.Graph``'s ``initializers``)."""
    value = ir.Value(
        name=name,
        type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
        shape=ir.Shape(array.shape),
    )
    value.const_value = ir.tensor(array, name=name)
    return value
