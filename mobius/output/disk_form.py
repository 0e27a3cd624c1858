"""What a graph leaves out on disk because any reader rebuilds it from what is there.

Two things are elided while a graph is written, and put back afterwards (the in-memory model
is unchanged by saving):

- the ``value_info`` of an initializer: its ``TensorProto`` already holds the dtype and dims, and
  onnx, onnx_ir and onnxruntime all take them from there (kept where the value has metadata or a
  doc string);
- onnxscript's ``pkg.onnxscript.name_scopes`` and ``pkg.onnxscript.class_hierarchy`` on a node
  whose ``namespace`` spells the same scopes and classes (``scope: class/scope: class``): the
  module path stays, once, in ``namespace`` (what ``mobius.testing.graphs`` and model viewers
  read). A node where the three disagree keeps all of them.

On SmolLM2-135M int4 that is 80 KB of a 353 KB graph file (docs/benchmarks.md, int4 section).
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator

import onnx_ir as ir

SCOPES = "pkg.onnxscript.name_scopes"
CLASSES = "pkg.onnxscript.class_hierarchy"


def _names(text: str | None) -> list[str] | None:
    try:
        names = ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError):
        return None
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        return names
    return None


def scopes_repeat_namespace(props: dict[str, str]) -> bool:
    """Whether ``props``' onnxscript scope and class lists say exactly what ``namespace`` says."""
    scopes, classes = _names(props.get(SCOPES)), _names(props.get(CLASSES))
    if scopes is None or classes is None or len(scopes) != len(classes) or not scopes:
        return False
    spelled = "/".join(f"{s}: {c}" for s, c in zip(scopes, classes, strict=True))
    return props.get("namespace") == spelled


@contextlib.contextmanager
def elided_on_disk(model: ir.Model) -> Iterator[None]:
    """Within the block, ``model`` lacks what a reader rebuilds (the module's docstring)."""
    types: list[tuple[ir.Value, ir.TypeProtocol | None, ir.Shape | None]] = []
    scopes: list[tuple[ir.Node, str, str]] = []
    try:
        for value in model.graph.initializers.values():
            if (
                value.const_value is None
                or value.is_graph_input()
                or value.metadata_props
                or value.doc_string
            ):
                continue
            types.append((value, value.type, value.shape))
            value.type = None
            value.shape = None
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            props = node.metadata_props
            if scopes_repeat_namespace(props):
                scopes.append((node, props.pop(SCOPES), props.pop(CLASSES)))
        yield
    finally:
        for value, type_, shape in types:
            value.type = type_
            value.shape = shape
        for node, scope, classes in scopes:
            node.metadata_props[SCOPES] = scope
            node.metadata_props[CLASSES] = classes
