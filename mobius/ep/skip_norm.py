"""Residual add + RMSNorm as one ``com.microsoft`` ``SkipSimplifiedLayerNormalization``.

A rewrite of the emitted graph for the GPU execution providers: ``s = a + b`` followed by
``RMSNormalization(s, gamma)`` (the residual stream entering a layer's norm) becomes one node
whose fourth output is ``s`` itself, read by the next residual add (the second and third, the
statistics, are left unnamed, as absent outputs). Like ``RMSNormalization`` with
``stash_type=1`` it computes the statistics in float32. Only the plain form is fused: a norm whose
input passes through a dtype-changing cast (Gemma's offset norm in half precision computes
``1 + weight`` in float32) stays as it is.
"""

from __future__ import annotations

import onnx_ir as ir

MS = "com.microsoft"


def _fusable(norm: ir.Node) -> ir.Node | None:
    """The residual ``Add`` feeding ``norm`` when the pair can be one node."""
    if norm.op_type != "RMSNormalization" or norm.domain != "":
        return None
    if norm.attributes.get_int("axis", -1) != -1 or norm.attributes.get_int("stash_type", 1) != 1:
        return None
    x = norm.inputs[0]
    add = x.producer()
    if add is not None and add.op_type == "Cast" and add.inputs[0].dtype == x.dtype:
        add = add.inputs[0].producer()  # a cast to the type it already has (Gemma's, in f32)
    if add is None or add.op_type != "Add" or add.domain != "":
        return None
    a, b = add.inputs
    if a is None or b is None or a.shape is None or b.shape is None:
        return None
    if a.dtype != b.dtype or a.dtype != norm.inputs[1].dtype or len(a.shape) != len(b.shape):
        return None  # SkipSimplifiedLayerNormalization wants one type and no broadcasting
    if a.shape.rank() != 3 or b.shape.rank() != 3:
        return None
    return add


def fuse_skip_norms(graph: ir.Graph) -> int:
    """Fuse every residual add + RMSNorm pair in ``graph``; returns how many."""
    count = 0
    for norm in list(graph):
        add = _fusable(norm)
        if add is None:
            continue
        a, b = add.inputs
        eps = norm.attributes.get_float("epsilon", 1e-5)
        fused = ir.node(
            "SkipSimplifiedLayerNormalization",
            [a, b, norm.inputs[1]],
            attributes={"epsilon": eps},
            domain=MS,
            num_outputs=4,
        )
        fused.name = (norm.name or "rms_norm") + ".skip"
        # the mean and inverse std outputs nobody reads stay absent (an empty name): onnxruntime
        # allocates and writes every output a node names
        fused.outputs[1].name = fused.outputs[2].name = ""
        for old, new in ((norm.outputs[0], fused.outputs[0]), (add.outputs[0], fused.outputs[3])):
            new.shape, new.type = old.shape, old.type
        graph.insert_after(add, fused)
        ir.convenience.replace_all_uses_with(norm.outputs[0], fused.outputs[0])
        ir.convenience.replace_all_uses_with(add.outputs[0], fused.outputs[3])
        for old, new in ((norm.outputs[0], fused.outputs[0]), (add.outputs[0], fused.outputs[3])):
            if old in graph.outputs:
                graph.outputs[graph.outputs.index(old)] = new
                new.name, old.name = old.name, None
        graph.remove([norm, add], safe=True)
        count += 1
    return count
