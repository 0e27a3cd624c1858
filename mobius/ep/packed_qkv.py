"""The three projections of an attention block as one MatMul (``[q | k | v]``).

``x W_q``, ``x W_k`` and ``x W_v`` are column blocks of ``x [W_q | W_k | W_v]``: one MatMul (and one
bias Add) whose packed output GQA splits itself (``pack_qkv``) or one ``Split`` hands back to the
rotary and ONNX ``Attention`` as three values (``pack_and_split``, ``--ep cpu``). The packed initializer is made lazily, when the
model is saved, from the checkpoint tensors (block by block transposed, as the unpacked ones were),
and records the source keys it came from (``--precision`` quantizes it like any linear weight).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from lowering.transposed import TransposedTensor
from mobius.ep.block import Block, producer
from mobius.output.joined import JoinedTensor


def _matmul_of(value: ir.Value) -> tuple[ir.Node, ir.Node | None] | None:
    """``value = MatMul(x, W) (+ b)`` with W (and b) initializers: (MatMul, Add or None)."""
    add = producer(value, "Add")
    bias = None
    if add is not None:
        bias = next((v for v in add.inputs if v is not None and v.is_initializer()), None)
        if bias is None:
            return None
        value = add.inputs[0] if add.inputs[1] is bias else add.inputs[1]
    matmul = producer(value, "MatMul")
    if matmul is None or not matmul.inputs[1].is_initializer():
        return None
    if matmul.inputs[1].const_value is None:
        return None
    out = (add or matmul).outputs[0]
    if sum(not _reads_leading_dims(user) for user, _ in out.uses()) != 1:
        return None  # the projection is read by more than the attention
    if add is not None and len(matmul.outputs[0].uses()) != 1:
        return None
    return matmul, add


def _reads_leading_dims(node: ir.Node) -> bool:
    """A ``Shape`` of batch and sequence only (the mask's query length): packed output has them too."""
    return node.op_type == "Shape" and node.attributes.get_int("end", 99) <= 2 and node.domain == ""


def _packed_weight(weights: list[ir.Value], name: str) -> ir.Value:
    """``[in, q + 2 kv]``: the transposed weights side by side, made lazily when saved."""
    tensors = [w.const_value for w in weights]
    rows = sum(int(t.shape[1]) for t in tensors)
    cols = int(tensors[0].shape[0])
    if all(isinstance(t, TransposedTensor) for t in tensors):
        stacked = JoinedTensor(
            [t.source_tensor for t in tensors], 0, name, tensors[0].dtype, [rows, cols]
        )
        tensor = TransposedTensor(stacked, name=name)
    else:
        tensor = JoinedTensor(tensors, 1, name, tensors[0].dtype, [cols, rows])
    keys = [
        t.metadata_props.get("mobius.source_key", w.name or "")
        for t, w in zip(tensors, weights, strict=True)
    ]
    tensor.metadata_props["mobius.source_keys"] = ",".join(keys)
    tensor.metadata_props["mobius.transform"] = "concat_rows,transpose"
    return _initializer(weights[0].graph, tensor, name)


def _packed_bias(biases: list[ir.Value], name: str) -> ir.Value:
    tensors = [b.const_value for b in biases]
    size = sum(int(t.shape[0]) for t in tensors)
    tensor = JoinedTensor(tensors, 0, name, tensors[0].dtype, [size])
    tensor.metadata_props["mobius.source_keys"] = ",".join(
        t.metadata_props.get("mobius.source_key", b.name or "")
        for t, b in zip(tensors, biases, strict=True)
    )
    tensor.metadata_props["mobius.transform"] = "concat"
    return _initializer(biases[0].graph, tensor, name)


def _initializer(graph: ir.Graph, tensor: ir.TensorProtocol, name: str) -> ir.Value:
    value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=tensor.shape)
    value.const_value = tensor
    graph.register_initializer(value)
    return value


def pack_qkv(
    graph: ir.Graph, block: Block, after: ir.Node | None = None
) -> tuple[ir.Value, list[ir.Node]] | None:
    """One MatMul (+ Add) computing ``[q | k | v]`` from the block's three projections, inserted
    before the attention node (or right after ``after``), or None when they are not three
    initializer MatMuls of one input with a bias on all or none."""
    found = [_matmul_of(v) for v in (block.q, block.k, block.v)]
    if any(f is None for f in found):
        return None
    matmuls = [f[0] for f in found]
    adds = [f[1] for f in found]
    if len({m.inputs[0] for m in matmuls}) != 1 or len({a is None for a in adds}) != 1:
        return None
    weights = [m.inputs[1] for m in matmuls]
    if len({w.dtype for w in weights}) != 1 or any(w.const_value is None for w in weights):
        return None
    name = f"{block.module}.qkv_proj"
    y = ir.node("MatMul", [matmuls[0].inputs[0], _packed_weight(weights, f"{name}.weight.T")])
    new = [y]
    if adds[0] is not None:
        biases = [next(v for v in a.inputs if v.is_initializer()) for a in adds]
        y = ir.node("Add", [y.outputs[0], _packed_bias(biases, f"{name}.bias")])
        new.append(y)
    for node in new:
        node.name = f"{block.module}/qkv_proj/{node.op_type}"
    if after is None:
        graph.insert_before(block.attention, new)
    else:
        graph.insert_after(after, new)
    packed = new[-1].outputs[0]
    for value in (block.q, block.k, block.v):
        for user, index in list(value.uses()):
            if _reads_leading_dims(user):
                user.replace_input_with(index, packed)
    return packed, [n for n in [*matmuls, *adds] if n is not None]


def pack_and_split(graph: ir.Graph, block: Block) -> bool:
    """``[q | k | v]`` from one MatMul (+ Add), then one ``Split`` into the three values the block
    read before (its rotary and ``Attention`` unchanged); False when ``pack_qkv`` declines."""
    found = [_matmul_of(v) for v in (block.q, block.k, block.v)]
    if any(f is None for f in found):
        return False
    widths = [found[i][0].inputs[1].shape[1] for i in range(3)]
    if not all(isinstance(w, int) for w in widths):
        return False
    order = {node: i for i, node in enumerate(graph)}
    last = max((n for f in found for n in f if n is not None), key=order.__getitem__)
    packed = pack_qkv(graph, block, after=last)
    if packed is None:
        return False
    value, _ = packed
    sizes = ir.node("Constant", [], attributes={"value": ir.tensor(np.array(widths, np.int64))})
    split = ir.node("Split", [value, sizes.outputs[0]], attributes={"axis": -1}, num_outputs=3)
    for i, node in enumerate((sizes, split)):
        node.name = f"{block.module}/qkv_proj/{node.op_type}_{i}"
    graph.insert_after(value.producer(), [sizes, split])
    for old, new in zip((block.q, block.k, block.v), split.outputs, strict=True):
        new.type, new.shape = old.type, old.shape
        ir.convenience.replace_all_uses_with(old, new)
    return True
