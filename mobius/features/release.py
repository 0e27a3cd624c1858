"""``mobius build --release``: strip build-time debug and provenance metadata from the graphs.

A build records where every node came from: node ``metadata_props`` (``namespace`` with the
module path and class, onnxscript's ``pkg.onnxscript.*`` scopes and class hierarchies), doc
strings, and whatever other tools add. A release graph keeps the computation and mobius's own
``mobius.*`` metadata keys (model type, task, dtype, weight sources, features), and the
producer's name and version; everything else of that kind goes. Node names stay (onnxruntime's
error messages and profiles name nodes), as do value names.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.output.package import ModelPackage

KEEP_PREFIX = "mobius."


def _keep_mobius(props: dict[str, str]) -> None:
    for key in [k for k in props if not k.startswith(KEEP_PREFIX)]:
        del props[key]


def _strip_value(value: ir.Value | None) -> None:
    if value is None:
        return
    value.doc_string = None
    _keep_mobius(value.metadata_props)
    if value.const_value is not None and hasattr(value.const_value, "metadata_props"):
        _keep_mobius(value.const_value.metadata_props)


def strip_graph(graph: ir.Graph | ir.Function) -> None:
    graph.doc_string = None
    _keep_mobius(graph.metadata_props)
    for value in [*graph.inputs, *graph.outputs]:
        _strip_value(value)
    if isinstance(graph, ir.Graph):
        for value in graph.initializers.values():
            _strip_value(value)
    for node in ir.traversal.RecursiveGraphIterator(graph):
        node.doc_string = None
        _keep_mobius(node.metadata_props)
        for out in node.outputs:
            _strip_value(out)
        for attr in node.attributes.values():
            attr.doc_string = None
    if isinstance(graph, ir.Graph):
        for sub in _subgraphs(graph):
            sub.doc_string = None
            _keep_mobius(sub.metadata_props)
            for value in [*sub.inputs, *sub.outputs, *sub.initializers.values()]:
                _strip_value(value)


def _subgraphs(graph: ir.Graph):
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield attr.value
            elif attr.type == ir.AttributeType.GRAPHS:
                yield from attr.value


def strip_model(model: ir.Model) -> ir.Model:
    """Remove debug and provenance metadata from ``model`` in place; returns it."""
    model.doc_string = None
    model.domain = None
    _keep_mobius(model.metadata_props)
    strip_graph(model.graph)
    for function in model.functions.values():
        strip_graph(function)
    return model


def release(package: ModelPackage) -> ModelPackage:
    """``--release``: every graph of ``package`` stripped (see the module's docstring)."""
    for model in package.graphs().values():
        strip_model(model)
        model.metadata_props["mobius.release"] = "true"
    return package
