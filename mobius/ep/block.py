"""One packed attention block of the emitted graph: the ``Attention`` node, its q/k/v before
rotary, its rotary nodes and head counts, found from the node, or why the GQA form cannot carry
it. ``gqa.py`` rewrites the blocks it finds; ``packed_qkv.py`` packs their projections."""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir


@dataclass
class Block:
    """One packed attention block of the emitted graph."""

    attention: ir.Node
    q: ir.Value  # before rotary
    k: ir.Value
    v: ir.Value
    rotary: tuple[ir.Node, ir.Node] | None
    module: str
    heads: tuple[int, int]  # query heads, key/value heads
    four_d: bool = False  # [batch, heads, seq, dim] in and out: transposed around GQA


def module_of(node: ir.Node) -> str:
    """``model.layers.0.self_attn`` from a node named ``v_model.layers.0.self_attn.attention.X``."""
    if node.name and "/" in node.name:  # the emitter names nodes module/component/op
        return node.name.split("/")[0]
    name = (node.outputs[0].name or "").removeprefix("v_")
    parts = name.split(".")
    for marker in ("attention", "rotary"):
        if marker in parts:
            return ".".join(parts[: parts.index(marker)])
    return ".".join(parts[:-1])


def producer(value: ir.Value | None, op_type: str) -> ir.Node | None:
    node = value.producer() if value is not None else None
    return node if node is not None and node.op_type == op_type and node.domain == "" else None


def ancestors(values: list[ir.Value]) -> tuple[set[ir.Node], set[ir.Value]]:
    """Nodes computing ``values`` and the graph inputs they read (initializers excluded)."""
    nodes: set[ir.Node] = set()
    inputs: set[ir.Value] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        node = value.producer()
        if node is None:
            if not value.is_initializer():
                inputs.add(value)
            continue
        if node in nodes:
            continue
        nodes.add(node)
        stack.extend(v for v in node.inputs if v is not None)
    return nodes, inputs


def _is_windowed(mask: ir.Value | None) -> bool:
    """The CausalMask component's window adds a ``Less`` on (query - key) positions."""
    if mask is None:
        return False
    nodes, _ = ancestors([mask])
    return any(n.op_type == "Less" for n in nodes)


def find_block(node: ir.Node) -> Block | str:
    """The block around an ``Attention`` node, or why GQA cannot carry it."""
    attrs = node.attributes
    if attrs.get_float("softcap", 0.0):
        return "attention logit softcapping"
    if len(node.inputs) < 6 or node.inputs[4] is None:
        return "the attention has no key/value cache"
    if _is_windowed(node.inputs[3]):
        return "a sliding-window mask"
    if "q_num_heads" not in attrs:
        return _four_d_block(node)
    q_rot, k_rot = (producer(v, "RotaryEmbedding") for v in node.inputs[:2])
    if (q_rot is None) != (k_rot is None):
        return "q and k are not rotated alike"
    rotary = None
    if q_rot is not None and k_rot is not None:
        if any(n.attributes.get_int("rotary_embedding_dim", 0) for n in (q_rot, k_rot)):
            return "partial rotary"
        if len(q_rot.inputs) > 3 or q_rot.inputs[1:3] != k_rot.inputs[1:3]:
            return "q and k are rotated with different tables"
        if q_rot.attributes.get_int("interleaved", 0) != k_rot.attributes.get_int("interleaved", 0):
            return "q and k are rotated in different layouts"
        rotary = (q_rot, k_rot)
    q = q_rot.inputs[0] if q_rot else node.inputs[0]
    k = k_rot.inputs[0] if k_rot else node.inputs[1]
    heads = (attrs.get_int("q_num_heads"), attrs.get_int("kv_num_heads"))
    return Block(node, q, k, node.inputs[2], rotary, module_of(node), heads)


def attention_inputs(node: ir.Node) -> Block | None:
    """The q/k/v (before rotary) of an ``Attention`` in the packed 3-D layout, whatever its mask
    or cache (``--ep cpu`` keeps the node and only packs the projections), else None."""
    if "q_num_heads" not in node.attributes:
        return None
    q, k = (
        rot.inputs[0] if (rot := producer(v, "RotaryEmbedding")) is not None else v
        for v in node.inputs[:2]
    )
    heads = (node.attributes.get_int("q_num_heads"), node.attributes.get_int("kv_num_heads"))
    return Block(node, q, k, node.inputs[2], None, module_of(node), heads)


def _four_d_block(node: ir.Node) -> Block | str:
    """The 4-D form (q/k already rotated, whatever sits before: QK-norm, partial rotary): GQA
    takes it transposed to ``[batch, seq, heads * dim]``, with rotary left where it is."""
    q, k, v = node.inputs[:3]
    past_key, past_value = node.inputs[4:6]
    dims = [past_key.shape, past_value.shape]
    if any(
        d is None or d.rank() != 4 or not isinstance(d[1], int) or not isinstance(d[3], int)
        for d in dims
    ):
        return "the cache is not [batch, kv_heads, past, head_dim] with static heads and sizes"
    (kv_heads, head_dim), v_dim = (dims[0][1], dims[0][3]), dims[1][3]
    if v_dim != head_dim:
        return "the value head size differs from the key's (MLA)"
    heads = _query_heads(node, head_dim)
    if heads is None:
        return "the query head count is not readable from the output projection"
    return Block(node, q, k, v, None, module_of(node), (heads, kv_heads), four_d=True)


def _query_heads(node: ir.Node, head_dim: int) -> int | None:
    """Query heads from ``y -> Transpose(0, 2, 1, 3) -> Reshape -> MatMul(W [heads * dim, out])``."""
    users = [u for u, _ in node.outputs[0].uses()]
    if len(users) != 1 or users[0].op_type != "Transpose":
        return None
    if list(users[0].attributes.get_ints("perm", [])) != [0, 2, 1, 3]:
        return None
    reshapes = [u for u, _ in users[0].outputs[0].uses()]
    if len(reshapes) != 1 or reshapes[0].op_type != "Reshape":
        return None
    widths = {
        u.inputs[1].shape[0]
        for u, i in reshapes[0].outputs[0].uses()
        if u.op_type == "MatMul"
        and i == 0
        and u.inputs[1].shape is not None
        and u.inputs[1].shape.rank() == 2
    }
    if len(widths) != 1 or not isinstance(width := widths.pop(), int) or width % head_dim:
        return None
    return width // head_dim
