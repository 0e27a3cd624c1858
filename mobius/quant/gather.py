"""A tied embedding's lookup reads the packed bytes of its quantized lm_head:
``Gather(W, ids)`` becomes ``com.microsoft`` ``GatherBlockQuantized`` over MatMulNBits' own B,
scales and zero points (reshaped to 2-D), so the weight is stored once, quantized."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.quant.blocks import Scheme

MS_DOMAIN = "com.microsoft"


def _lookups(weight: ir.Value) -> list[ir.Node] | None:
    """The Gather(weight, ids, axis=0) nodes using ``weight``, or None if it has any other use."""
    nodes = []
    for node, index in weight.uses():
        if node.domain not in ("", "ai.onnx") or node.op_type != "Gather" or index != 0:
            return None
        if node.attributes.get_int("axis", 0) != 0:
            return None
        nodes.append(node)
    return nodes


def share_with_gathers(weight: ir.Value, packed: list[ir.Value], scheme: Scheme) -> bool:
    """Replace every lookup of ``weight`` ([N, K]) by GatherBlockQuantized over ``packed``.

    Declines (False, weight untouched) when the weight has other uses, or when K is not a whole
    number of blocks: the packed rows then carry padding that a lookup would return.
    """
    nodes = _lookups(weight)
    n, k = (int(d) for d in weight.shape)
    if not nodes or k % scheme.block_size:
        return False
    graph = packed[0].graph
    rows = ir.Value(
        name=f"{packed[0].name}.rows_shape",
        type=ir.TensorType(ir.DataType.INT64),
        shape=ir.Shape([2]),
        const_value=ir.tensor(np.array([n, -1], dtype=np.int64)),
    )
    graph.register_initializer(rows)
    for node in nodes:
        owner = node.graph
        flat = []
        for value in packed:
            reshape = ir.Node("", "Reshape", [value, rows], name=f"{value.name}.as_rows")
            owner.insert_before(node, reshape)
            flat.append(reshape.outputs[0])
        data, scales, *zero_points = flat
        gather = ir.Node(
            MS_DOMAIN,
            "GatherBlockQuantized",
            [data, node.inputs[1], scales, *zero_points],
            attributes=[
                ir.AttrInt64("gather_axis", 0),
                ir.AttrInt64("quantize_axis", 1),
                ir.AttrInt64("block_size", scheme.block_size),
                ir.AttrInt64("bits", scheme.bits),
            ],
            name=f"{node.name or weight.name}.GatherBlockQuantized",
            metadata_props=dict(node.metadata_props),
        )
        swap_node(node, gather)
    return True


def take_over(old: ir.Value, new: ir.Value) -> None:
    """``new`` takes ``old``'s shape, type, name and uses (a graph output included)."""
    new.shape, new.type = old.shape, old.type
    name = old.name
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    old.name = None
    new.name = name


def swap_node(node: ir.Node, replacement: ir.Node) -> None:
    """Put ``replacement`` where ``node`` is; its output takes over the old one's name and uses."""
    owner = node.graph
    owner.insert_before(node, replacement)
    take_over(node.outputs[0], replacement.outputs[0])
    owner.remove(node, safe=True)
