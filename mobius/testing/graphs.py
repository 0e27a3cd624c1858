"""Reading a saved graph back for tests: which ONNX ops each layer became."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import onnx


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
