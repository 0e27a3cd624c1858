"""Linear weights as the checkpoint stores them (``[out, in]``), read by ``FusedMatMul(transB=1)``.

The portable graph multiplies by ``W^T``: ``MatMul(x, <key>.T)``, the transpose made while the
weights are written (``lowering.transposed``). onnxruntime's CPU, CUDA and DirectML providers
have ``com.microsoft`` ``FusedMatMul``, whose ``transB=1`` costs nothing (on the CPU, 0.88-1.04x
MatMul's time in float32 and float16, 1 and 32 rows; docs/design/weights-io.md). For them each
float ``MatMul`` by a transposed initializer becomes ``FusedMatMul`` by the untransposed source,
stored under its own key (packed q/k/v: the projections' rows one after another), so its bytes
are copied or cast as they lie in the checkpoint. The WebGPU provider has no ``FusedMatMul``
kernel and the portable graph uses standard ops only: both keep ``W^T``.

Runs after quantization (``mobius.quant``), which reads the ``MatMul(x, W^T)`` form.
"""

from __future__ import annotations

import onnx_ir as ir

from lowering.transposed import TransposedTensor

MS = "com.microsoft"
STORED_LAYOUT_EPS = ("cpu", "cuda", "dml")


def use_stored_weights(model: ir.Model) -> int:
    """Turn every ``MatMul(x, W^T)`` whose ``W^T`` is transposed at write into
    ``FusedMatMul(x, W, transB=1)``; returns how many."""
    graph = model.graph
    count = 0
    for node in list(graph):
        stored = _stored_source(graph, node)
        if stored is None:
            continue
        transposed = node.inputs[1]
        node.replace_input_with(1, stored)
        node.op_type, node.domain = "FusedMatMul", MS
        node.attributes["transB"] = ir.AttrInt64("transB", 1)
        if not transposed.uses():
            graph.initializers.pop(transposed.name)
        count += 1
    if count:
        model.opset_imports.setdefault(MS, 1)
    return count


def _stored_source(graph: ir.Graph, node: ir.Node) -> ir.Value | None:
    """The initializer holding the untransposed weight of a ``MatMul(x, W^T)``, registered under
    the key ``W^T`` was named after; None where the node is not one (or the name is taken)."""
    if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2:
        return None
    weight = node.inputs[1]
    tensor = weight.const_value if weight is not None and weight.is_initializer() else None
    if not isinstance(tensor, TransposedTensor) or len(weight.uses()) != 1:
        return None
    source = tensor.source_tensor
    if not isinstance(source, ir.TensorProtocol) or not (weight.name or "").endswith(".T"):
        return None  # a source that is not a tensor (lowering.packed's stacked rows)
    name = weight.name[: -len(".T")]
    taken = graph.initializers.get(name)
    if taken is not None:
        return taken if taken.const_value is source else None
    _carry_metadata(tensor, source)
    value = ir.Value(name=name, type=ir.TensorType(source.dtype), shape=ir.Shape(source.shape))
    value.const_value = source
    graph.register_initializer(value)
    return value


def _carry_metadata(transposed: ir.TensorProtocol, source: ir.TensorProtocol) -> None:
    """Where the stored tensor came from, as the transposed one recorded it, less the transpose."""
    props = source.metadata_props
    for key in ("mobius.source_key", "mobius.source_keys"):
        if key in transposed.metadata_props:
            props[key] = transposed.metadata_props[key]
    steps = [
        s
        for s in transposed.metadata_props.get("mobius.transform", "").split(",")
        if s and s != "transpose"
    ]
    if steps:
        props["mobius.transform"] = ",".join(steps)
    else:
        props.pop("mobius.transform", None)
