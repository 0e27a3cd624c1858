"""Linears of one activation in one ``MatMulNBits``: q/k/v, gate/up (``--ep cpu``).

``MatMulNBits`` stores a weight row by row (output feature ``n``): ``B`` ``[N, blocks, blob]``,
``scales`` ``[N * blocks]``, ``zero_points`` ``[N * bytes per row]``. Two or more of them that read
the same activation with the same ``K``, bits, block size and ``accuracy_level`` (and the same
kind of zero points) are therefore one MatMulNBits over their parts concatenated along ``N``,
whose output a ``Split`` on the last axis hands back: the same codes, scales and zero points,
so the same values, in one kernel a step instead of three (attention) or two (gated MLP).

Runs after the weights are quantized or placed (``--precision``, GGUF blocks, GPTQ/AWQ tensors),
so it packs whatever lines up whatever the source. The packed parts are concatenated lazily,
when saved, from the parts' own lazy tensors; a part read by any other node (a tied lm_head's
bytes that the embedding lookup shares) keeps its linear apart.

Then a bias ``Add`` of a ``[N]`` initializer right after a MatMulNBits (Qwen2's packed q/k/v
bias) becomes the node's optional ``bias`` input (input 5): one node a step fewer per layer.
onnxruntime 1.32's CPU EP fuses that ``Add`` itself when the session loads (no ``Add`` is left
in its profile), so this is the graph saying what runs, not a faster kernel.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx_ir as ir

from mobius.output.joined import JoinedTensor
from mobius.quant.gather import take_over
from mobius.quant.linears import MS_DOMAIN

ATTRIBUTES = ("K", "bits", "block_size", "accuracy_level")


def _packable(node: ir.Node) -> tuple | None:
    """The grouping key of a MatMulNBits whose B, scales (and zero points) are initializers read
    by it alone, else None."""
    if node.domain != MS_DOMAIN or node.op_type != "MatMulNBits" or len(node.inputs) not in (3, 4):
        return None
    a, *parts = node.inputs
    if a is None or any(
        p is None or p.const_value is None or not p.is_initializer() for p in parts
    ):
        return None
    if any(len(p.uses()) != 1 or p.is_graph_output() for p in parts):
        return None
    attrs = tuple(node.attributes.get_int(name, 0) for name in ATTRIBUTES)
    kinds = tuple((p.dtype, tuple(int(d) for d in p.shape[1:])) for p in parts)
    return (id(node.graph), id(a), attrs, kinds)


def pack_matmulnbits(model: ir.Model) -> list[list[str]]:
    """Merge, in place, each group of MatMulNBits nodes that read one activation into one
    MatMulNBits and a Split, then move bias ``Add``s into the nodes (``fuse_biases``); returns
    the merged groups as lists of their weights' source keys."""
    groups: dict[tuple, list[ir.Node]] = defaultdict(list)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        key = _packable(node)
        if key is not None:
            groups[key].append(node)
    merged = []
    sizes: dict[tuple[int, ...], ir.Value] = {}  # one split-size initializer per distinct split
    for nodes in groups.values():
        if len(nodes) > 1:
            merged.append([_key(n.inputs[1]) for n in nodes])
            _merge(nodes, sizes)
    fuse_biases(model)
    unflatten(model)
    return merged


def unflatten(model: ir.Model) -> int:
    """Drop the ``Reshape`` pair around a MatMulNBits that flattens its input to ``[-1, K]`` and
    restores the leading axes after (a ``Gemm``'s lowering, the lm_head): MatMulNBits takes
    ``[..., K]`` itself. Same values, four to six nodes a step fewer; returns how many."""
    dropped = 0
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        pair = _flattened(node)
        if pair is None:
            continue
        flatten, restore = pair
        node.replace_input_with(0, flatten.inputs[0])
        take_over(restore.outputs[0], node.outputs[0])
        graph = node.graph
        graph.remove(restore, safe=True)
        if not flatten.outputs[0].uses():
            graph.remove(flatten, safe=True)
        dropped += 1
    if dropped:
        _remove_dead(model.graph)
    return dropped


def _flattened(node: ir.Node) -> tuple[ir.Node, ir.Node] | None:
    """(flatten, restore) when ``node`` is a MatMulNBits reading ``Reshape(x, Concat([-1],
    Shape(x, start=-1)))`` and read only by ``Reshape(y, Concat(Shape(x, end=-1), [-1]))``."""
    if node.domain != MS_DOMAIN or node.op_type != "MatMulNBits":
        return None
    flatten = node.inputs[0].producer() if node.inputs[0] is not None else None
    uses = node.outputs[0].uses()
    if flatten is None or flatten.op_type != "Reshape" or len(uses) != 1:
        return None
    restore, index = uses[0]
    if restore.op_type != "Reshape" or index != 0 or node.outputs[0].is_graph_output():
        return None
    x = flatten.inputs[0]
    if _concat_of(flatten.inputs[1], x, [-1], {"start": -1}, last=True) and _concat_of(
        restore.inputs[1], x, [-1], {"start": 0, "end": -1}, last=False
    ):
        return flatten, restore
    return None


def _concat_of(shape: ir.Value, x: ir.Value, ints: list[int], axes: dict, last: bool) -> bool:
    """``shape`` is ``Concat(ints, Shape(x, **axes))`` (``last``) or ``Concat(Shape(x, ...),
    ints)``."""
    concat = shape.producer() if shape is not None else None
    if concat is None or concat.op_type != "Concat" or len(concat.inputs) != 2:
        return False
    constant, of_x = (concat.inputs[0], concat.inputs[1]) if last else concat.inputs[::-1]
    tensor = ir.convenience.get_const_tensor(constant) if constant is not None else None
    if tensor is None or tensor.numpy().tolist() != ints:
        return False
    shape_node = of_x.producer() if of_x is not None else None
    if shape_node is None or shape_node.op_type != "Shape" or shape_node.inputs[0] is not x:
        return False
    start = shape_node.attributes.get_int("start", 0)
    end = shape_node.attributes.get_int("end", None)
    return start == axes.get("start", 0) and end == axes.get("end")


def _remove_dead(graph: ir.Graph) -> None:
    """Drop the shape nodes and constants only the removed Reshapes read."""
    outputs = set(graph.outputs)
    for node in reversed(list(graph)):
        if all(not o.uses() and o not in outputs for o in node.outputs):
            graph.remove(node, safe=True)
    for name, value in list(graph.initializers.items()):
        if not value.uses() and value not in outputs and value not in graph.inputs:
            del graph.initializers[name]


BIAS_INPUT = 5  # MatMulNBits: A, B, scales, zero_points, g_idx, bias


def fuse_biases(model: ir.Model) -> int:
    """Move each ``Add(MatMulNBits(...), b)`` with ``b`` a ``[N]`` initializer of the activation's
    dtype into the node's ``bias`` input, in place; returns how many were moved."""
    fused = 0
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        bias, add = _bias_add(node)
        if bias is None:
            continue
        node.resize_inputs(BIAS_INPUT + 1)  # the optional inputs between stay absent (None)
        node.replace_input_with(BIAS_INPUT, bias)
        out, summed = node.outputs[0], add.outputs[0]
        out.shape, out.type = summed.shape, summed.type
        name = summed.name
        summed.replace_all_uses_with(out, replace_graph_outputs=True)
        node.graph.remove(add, safe=True)
        out.name = name
        fused += 1
    return fused


def _bias_add(node: ir.Node) -> tuple[ir.Value | None, ir.Node | None]:
    """(bias, Add) when ``node`` is a MatMulNBits without a bias whose only reader adds a
    ``[N]`` initializer of its output's dtype, else (None, None)."""
    if node.domain != MS_DOMAIN or node.op_type != "MatMulNBits" or len(node.inputs) > 4:
        return None, None
    out = node.outputs[0]
    uses = out.uses()
    if len(uses) != 1 or out.is_graph_output():
        return None, None
    add, index = uses[0]
    if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
        return None, None
    bias = add.inputs[1 - index]
    n = node.attributes.get_int("N", 0)
    if bias is None or not bias.is_initializer() or bias.const_value is None:
        return None, None
    if bias.dtype != node.inputs[2].dtype or list(bias.shape or []) != [n]:
        return None, None
    return bias, add


def _merge(nodes: list[ir.Node], shared_sizes: dict[tuple[int, ...], ir.Value]) -> None:
    graph = nodes[0].graph
    order = {id(n): i for i, n in enumerate(graph)}
    nodes = sorted(nodes, key=lambda n: order[id(n)])
    first = nodes[0]
    widths = [n.attributes.get_int("N") for n in nodes]
    names = [n.inputs[1].name for n in nodes]
    parts = [
        _concatenated([n.inputs[i] for n in nodes], _packed_name(names, i))
        for i in range(1, len(first.inputs))
    ]
    attributes = dict(first.attributes.items())
    attributes["N"] = ir.AttrInt64("N", sum(widths))
    packed = ir.Node(
        MS_DOMAIN,
        "MatMulNBits",
        [first.inputs[0], *parts],
        attributes=list(attributes.values()),
        name=f"{_common_prefix([n.name or '' for n in nodes])}packed.MatMulNBits",
        metadata_props=dict(first.metadata_props),
    )
    sizes = shared_sizes.get(tuple(widths))
    if sizes is None:  # one per distinct split (every layer's gate/up splits alike)
        sizes = ir.Value(
            name=f"matmulnbits_split_sizes_{'_'.join(str(w) for w in widths)}",
            type=ir.TensorType(ir.DataType.INT64),
            shape=ir.Shape([len(widths)]),
            const_value=ir.tensor(np.array(widths, dtype=np.int64)),
        )
        graph.register_initializer(sizes)
        shared_sizes[tuple(widths)] = sizes
    split = ir.Node(
        "",
        "Split",
        [packed.outputs[0], sizes],
        attributes=[ir.AttrInt64("axis", -1)],
        num_outputs=len(nodes),
        name=f"{packed.name}.Split",
    )
    graph.insert_before(first, [packed, split])
    for old, new in zip(nodes, split.outputs, strict=True):
        value = old.outputs[0]
        new.shape, new.type = value.shape, value.type
        name = value.name
        value.replace_all_uses_with(new, replace_graph_outputs=True)
        value.name = None
        new.name = name
    for old in nodes:
        retired = [v.name for v in old.inputs[1:]]
        graph.remove(old, safe=True)
        for name in retired:
            graph.initializers.pop(name, None)


def _key(value: ir.Value) -> str:
    props = value.const_value.metadata_props
    return props.get("mobius.source_key") or props.get("mobius.source_keys") or value.name or ""


def _common_prefix(names: list[str]) -> str:
    prefix = names[0]
    for name in names[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    return prefix


def _packed_name(names: list[str], index: int) -> str:
    """``model.layers.0.self_attn.{q,k,v}_proj...`` -> a name the graph does not have yet."""
    prefix = _common_prefix(names)
    tails = "+".join(name[len(prefix) :].split(".")[0] for name in names)
    return f"{prefix}{tails}.packed.{('b', 'scales', 'zero_points')[index - 1]}"


def _concatenated(values: list[ir.Value], name: str) -> ir.Value:
    """One initializer holding ``values`` one after the other along the first axis, read from
    them when saved; it records all their source keys."""
    tensors = [v.const_value for v in values]
    shape = [sum(int(t.shape[0]) for t in tensors), *(int(d) for d in tensors[0].shape[1:])]

    dtype = tensors[0].dtype
    lazy = JoinedTensor(tensors, 0, name, dtype, shape)
    lazy.metadata_props["mobius.source_keys"] = ",".join(_key(v) for v in values)
    transform = tensors[0].metadata_props.get("mobius.transform", "")
    lazy.metadata_props["mobius.transform"] = f"{transform}; rows of {len(values)} linears packed"
    value = ir.Value(name=name, type=ir.TensorType(dtype), shape=lazy.shape)
    value.const_value = lazy
    values[0].graph.register_initializer(value)
    return value
