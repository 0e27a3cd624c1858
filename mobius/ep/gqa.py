"""GroupQueryAttention (``com.microsoft``): packed QKV, rotary inside, for the GPU execution
providers and ``--ep cpu`` with ``--precision``.

A rewrite of the emitted graph, not a pattern: the packed attention block (``patterns/
attention_block.py``) has already become ``RotaryEmbedding`` on q and k and ONNX ``Attention``-23
over ``[batch, seq, heads * dim]``; this module swaps each such block for one
``GroupQueryAttention`` (GQA) node:

- **rotary inside** (``do_rotary=1``): the ``[batch, seq, rotary_dim/2]`` tables the graph computes
  from ``position_ids`` are evaluated once, at build time, for positions ``0..context-1`` into the
  ``cos_cache``/``sin_cache`` initializers GQA indexes by each token's cache slot. The
  tables must be a function of each position alone; they are checked to be (rows of a short,
  unordered id list equal the cache's rows), which refuses longrope/dynamic tables that switch on
  the sequence length. For ``--ep cpu`` the tables are not stored: the graph's own table
  subgraph is fed ``range(total_sequence_length)`` instead of ``position_ids`` and computes the
  caches at every run (``computed_caches``).
- **packed QKV**: the three projections of one input become one MatMul (and one bias Add) whose
  ``[batch, seq, (heads + 2 kv_heads) * dim]`` output GQA splits itself (separate inputs where the
  weights are not initializers, as with ``--no-weights``).
- **the mask becomes lengths and a bias**: ``seqlens_k = total - 1`` for every row and
  ``total_sequence_length`` = the mask's length, so every row's keys are the mask's columns in
  the cache's own order, and the additive mask the portable graph built for ``Attention``
  (padding and causality, ``[batch, 1, seq, total]``) goes in as GQA's ``attention_bias``: left-
  and right-padded batches are exact, as in the portable graph (GQA alone, with ``seqlens_k =
  sum(mask) - 1``, reads every row as right-padded).

Blocks left in the 4-D layout (QK-norm, partial rotary, splits the packed pattern declines) get
GQA over transposed inputs, their rotary left outside (``do_rotary=0``). A block GQA cannot
express stays ONNX ``Attention`` with the reason returned (the caller records it in explain):
sliding windows, softcap, MLA's value head size, length-dependent rotary tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from mobius.ep.block import Block, ancestors
from mobius.ep.packed_qkv import pack_qkv

MS = "com.microsoft"
INT32, INT64 = ir.DataType.INT32, ir.DataType.INT64


def _packed_layout(value: ir.Value, name: str) -> tuple[ir.Value, list[ir.Node]]:
    """``[batch, heads, seq, dim] -> [batch, seq, heads * dim]``."""
    transpose = ir.node("Transpose", [value], attributes={"perm": [0, 2, 1, 3]})
    shape = ir.node("Constant", [], attributes={"value": ir.tensor(np.array([0, 0, -1], np.int64))})
    reshape = ir.node("Reshape", [transpose.outputs[0], shape.outputs[0]])
    for i, node in enumerate((transpose, shape, reshape)):
        node.name = f"{name}/{node.op_type}_{i}"
    return reshape.outputs[0], [transpose, shape, reshape]


def _heads_layout(
    value: ir.Value, heads: int, dim: int, name: str
) -> tuple[ir.Value, list[ir.Node]]:
    """``[batch, seq, heads * dim] -> [batch, heads, seq, dim]``."""
    shape = ir.node(
        "Constant", [], attributes={"value": ir.tensor(np.array([0, 0, heads, dim], np.int64))}
    )
    reshape = ir.node("Reshape", [value, shape.outputs[0]])
    transpose = ir.node("Transpose", [reshape.outputs[0]], attributes={"perm": [0, 2, 1, 3]})
    for i, node in enumerate((shape, reshape, transpose)):
        node.name = f"{name}/{node.op_type}_{i}"
    return transpose.outputs[0], [shape, reshape, transpose]


def rotary_caches(
    graph: ir.Graph, opsets: dict[str, int], cos: ir.Value, sin: ir.Value, positions: int
) -> tuple[np.ndarray, np.ndarray] | str:
    """``cos_cache``/``sin_cache`` ``[positions, rotary_dim/2]``, evaluated from the graph's own
    table subgraph, or why it cannot be (tables reading more than ``position_ids``, or tables that
    are not a function of each position alone)."""
    import onnxruntime as ort

    _, inputs = ancestors([cos, sin])
    if {v.name for v in inputs} != {"position_ids"}:
        names = sorted(v.name or "?" for v in inputs)
        return f"the rotary tables read {', '.join(names)}, not position_ids alone"
    sub = ir.convenience.extract(graph, inputs=["position_ids"], outputs=[cos, sin])
    sub.outputs[0].name, sub.outputs[1].name = "cos", "sin"
    sub.opset_imports.update(opsets)
    proto = ir.serde.serialize_model(ir.Model(sub, ir_version=10))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])

    def tables(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c, s = session.run(None, {"position_ids": ids[None, :].astype(np.int64)})
        return c[0], s[0]

    cos_cache, sin_cache = tables(np.arange(positions))
    probe = np.array([5, 0, 3, 1, 2, 4])  # short and unordered: a length-dependent table differs
    probe = probe[probe < positions]
    c, s = tables(probe)
    if not (
        np.allclose(c, cos_cache[probe], atol=1e-6) and np.allclose(s, sin_cache[probe], atol=1e-6)
    ):
        return "the rotary tables depend on the sequence length (longrope/dynamic scaling)"
    return cos_cache, sin_cache


def computed_caches(
    graph: ir.Graph,
    opsets: dict[str, int],
    cos: ir.Value,
    sin: ir.Value,
    total: ir.Value,
    rotary: set[ir.Node],
    index: int = 0,
) -> tuple[ir.Value, ir.Value] | str:
    """``cos_cache``/``sin_cache`` computed by the graph at every run for positions
    ``0..total-1`` (int64 scalar ``total``: the mask's length), by the graph's own table subgraph
    fed with those positions in place of ``position_ids``: no initializer (a
    ``[context, rotary_dim/2]`` pair is 2.1 MB for SmolLM2's 8192 positions), a few hundred
    flops per position a run. The tables are checked as for ``rotary_caches``; the subgraph is
    rewired, not copied, so it must feed nothing but the ``rotary`` nodes GQA replaces (else the
    reason is returned and nothing is changed)."""
    found = rotary_caches(graph, opsets, cos, sin, 8)
    if isinstance(found, str):
        return found
    half = found[0].shape[1]
    nodes, _ = ancestors([cos, sin])
    for node in nodes:
        for out in node.outputs:
            if out in graph.outputs or any(
                user not in nodes and user not in rotary for user, _ in out.uses()
            ):
                return "the rotary tables' nodes feed more than the rotary"
    ints = [ir.tensor(np.array(v, np.int64)) for v in (0, 1, [0], [-1, half])]
    zero, one, axes, rows = (ir.node("Constant", [], attributes={"value": t}) for t in ints)
    positions = ir.node("Range", [zero.outputs[0], total, one.outputs[0]])
    batch_of_one = ir.node("Unsqueeze", [positions.outputs[0], axes.outputs[0]])
    new = [zero, one, axes, rows, positions, batch_of_one]
    for node in nodes:
        for i, value in enumerate(node.inputs):
            if value is not None and value.name == "position_ids" and value.producer() is None:
                node.replace_input_with(i, batch_of_one.outputs[0])
    caches = []
    for table, kind in ((cos, "cos"), (sin, "sin")):
        reshape = ir.node("Reshape", [table, rows.outputs[0]])
        reshape.outputs[0].name = f"{kind}_cache{'' if index == 0 else f'_{index}'}"
        new.append(reshape)
        caches.append(reshape.outputs[0])
    for i, node in enumerate(new):
        node.name = f"gqa_rotary_caches{'' if index == 0 else f'_{index}'}.{node.op_type}_{i}"
    graph.extend(new)  # the caller sorts the graph
    _simplify_tables(graph, nodes, half)
    return caches[0], caches[1]


def _simplify_tables(graph: ir.Graph, nodes: set[ir.Node], half: int) -> None:
    """Drop what does nothing in the (rewired, private) table subgraph, which now runs for every
    position at each step: a ``Mul`` by the scalar 1 (plain RoPE's attention scaling), and the
    first-half ``Slice`` of ``cos``/``sin`` of ``Concat(freqs, freqs)`` (elementwise, so that half
    is ``cos``/``sin`` of ``freqs``: half the work)."""
    for node in [n for n in nodes if n.op_type == "Mul" and n.domain == ""]:
        for i in (0, 1):
            one, other = node.inputs[i], node.inputs[1 - i]
            tensor = ir.convenience.get_const_tensor(one) if one is not None else None
            if tensor is None or other is None or tensor.size != 1 or len(tensor.shape) > 0:
                continue
            if float(tensor.numpy()) != 1.0 or other.dtype != node.outputs[0].dtype:
                continue
            node.outputs[0].replace_all_uses_with(other)
            graph.remove(node, safe=True)
            break
    for node in [n for n in nodes if n.op_type == "Slice" and n.domain == "" and n.graph]:
        unary = node.inputs[0].producer()
        if (
            unary is None
            or unary.op_type not in ("Cos", "Sin")
            or len(unary.outputs[0].uses()) != 1
        ):
            continue
        concat = unary.inputs[0].producer()
        if concat is None or concat.op_type != "Concat" or len(concat.inputs) != 2:
            continue
        freqs = concat.inputs[0]
        if concat.inputs[1] is not freqs or freqs.shape is None or freqs.shape.rank() is None:
            continue
        rank = freqs.shape.rank()
        if concat.attributes.get_int("axis", 0) not in (-1, rank - 1) or freqs.shape[-1] != half:
            continue
        bounds = [
            ir.convenience.get_const_tensor(v) if v is not None else None for v in node.inputs[1:]
        ]
        wanted = ([0], [half], [-1, rank - 1], [1])
        if len(bounds) < 3 or any(b is None for b in bounds[:3]):
            continue
        values = [b.numpy().reshape(-1).tolist() for b in bounds if b is not None]
        if values[0] != wanted[0] or values[1] != wanted[1] or values[2][0] not in wanted[2]:
            continue
        if len(values) > 3 and values[3] != wanted[3]:
            continue
        unary.replace_input_with(0, freqs)
        unary.outputs[0].shape = node.outputs[0].shape
        node.outputs[0].replace_all_uses_with(unary.outputs[0])
        graph.remove(node, safe=True)
        if not concat.outputs[0].uses():
            graph.remove(concat, safe=True)


@dataclass
class Lengths:
    """The GQA inputs derived once from ``attention_mask``."""

    seqlens_k: ir.Value
    total: ir.Value
    total_int64: ir.Value  # the same scalar before its cast to int32


def lengths(graph: ir.Graph, mask: ir.Value, before: ir.Node) -> Lengths:
    """``total = mask.shape[1]`` (int32 scalar) and ``seqlens_k = total - 1`` for every row (int32
    [batch]): the rows' keys are all the mask's columns; which of them are padding is the
    attention bias's business (``bias_of``)."""
    shape = ir.node("Shape", [mask], attributes={"start": 1, "end": 2})
    squeeze = ir.node("Squeeze", [shape.outputs[0]])
    total = ir.node("Cast", [squeeze.outputs[0]], attributes={"to": INT32})
    one = ir.node("Constant", [], attributes={"value": ir.tensor(np.array(1, dtype=np.int32))})
    last = ir.node("Sub", [total.outputs[0], one.outputs[0]])
    batch = ir.node("Shape", [mask], attributes={"start": 0, "end": 1})
    seqlens = ir.node("Expand", [last.outputs[0], batch.outputs[0]])
    nodes = [shape, squeeze, total, one, last, batch, seqlens]
    for i, node in enumerate(nodes):
        node.name = f"gqa_lengths.{node.op_type}_{i}"
    seqlens.outputs[0].name, total.outputs[0].name = "seqlens_k", "total_sequence_length"
    graph.insert_before(before, nodes)
    return Lengths(seqlens.outputs[0], total.outputs[0], squeeze.outputs[0])


def bias_of(block: Block) -> ir.Value | None:
    """The additive mask the block's ``Attention`` reads, when GQA can take it as
    ``attention_bias`` (float of the block's dtype, ``[batch or 1, 1 or heads, seq, total]``)."""
    mask = block.attention.inputs[3] if len(block.attention.inputs) > 3 else None
    if mask is None or mask.dtype != block.attention.inputs[0].dtype:
        return None
    if mask.shape is not None and mask.shape.rank() != 4:
        return None
    return mask


def replace_block(
    graph: ir.Graph,
    block: Block,
    lens: Lengths,
    caches: tuple[ir.Value, ir.Value] | None,
    positions: ir.Value | None,
    *,
    pack: bool = True,
    rotary_inside: bool = True,
) -> bool:
    """Swap the block's Attention (and rotary) for GroupQueryAttention; True when QKV was packed.

    Without ``pack``, q/k/v stay three inputs; without ``rotary_inside``, the packed block's rotary
    becomes ``com.microsoft`` ``RotaryEmbedding`` over the same caches, outside GQA (DirectML's
    form in onnxruntime-genai's builder)."""
    node = block.attention
    before: list[ir.Node] = []
    if block.rotary is not None and not rotary_inside:
        _rotary_outside(graph, block, caches, positions)
    packed = None if block.four_d or not pack else pack_qkv(graph, block)
    if packed is not None:
        qkv, _ = packed
        q, k, v = qkv, None, None
    elif block.four_d:
        layouts = [
            _packed_layout(x, f"{block.module}/gqa_{n}")
            for x, n in zip((block.q, block.k, block.v), "qkv", strict=True)
        ]
        (q, qn), (k, kn), (v, vn) = layouts
        before = [*qn, *kn, *vn]
        graph.insert_before(node, before)
    else:
        q, k, v = block.q, block.k, block.v
    bias = bias_of(block)
    inputs = [q, k, v, node.inputs[4], node.inputs[5], lens.seqlens_k, lens.total]
    attrs = {"num_heads": block.heads[0], "kv_num_heads": block.heads[1]}
    if "scale" in node.attributes:
        attrs["scale"] = node.attributes.get_float("scale")
    if block.rotary is not None:
        # no position_ids: GQA then rotates each token by its cache slot, in the prompt and in
        # every step alike (onnxruntime's CPU kernel reads position_ids per token only after the
        # prompt); a row's slots are its positions plus a constant (its left padding), which
        # rotary attention does not see
        inputs += [*caches]
        attrs["do_rotary"] = 1
        attrs["rotary_interleaved"] = block.rotary[0].attributes.get_int("interleaved", 0)
    if bias is not None:
        inputs += [None] * (10 - len(inputs)) + [bias]  # input 10: attention_bias
    gqa = ir.node("GroupQueryAttention", inputs, attributes=attrs, domain=MS, num_outputs=3)
    gqa.name = f"{block.module}/group_query_attention"
    old = [node, *(block.rotary or ())]
    new, outputs = [gqa], list(gqa.outputs)
    if block.four_d:
        dim = int(node.inputs[5].shape[3])
        y, after = _heads_layout(gqa.outputs[0], block.heads[0], dim, f"{block.module}/gqa_y")
        new, outputs[0] = [gqa, *after], y
    outputs = outputs[: len(node.outputs)]
    ir.convenience.replace_nodes_and_values(graph, node, old, new, list(node.outputs), outputs)
    return packed is not None


def _rotary_outside(
    graph: ir.Graph, block: Block, caches: tuple[ir.Value, ir.Value], positions: ir.Value
) -> None:
    """Rotate q and k with ``com.microsoft`` ``RotaryEmbedding`` (cache indexed by position_ids)
    and drop the block's rotary from what GQA replaces."""
    rotated = []
    for source, old, which in zip((block.q, block.k), block.rotary, "qk", strict=True):
        interleaved = old.attributes.get_int("interleaved", 0)
        new = ir.node(
            "RotaryEmbedding",
            [source, positions, *caches],
            attributes={"interleaved": interleaved},
            domain=MS,
        )
        new.name = f"{block.module}/rotary/RotaryEmbedding_{which}"
        new.outputs[0].type, new.outputs[0].shape = source.type, source.shape
        graph.insert_before(old, new)
        rotated.append(new.outputs[0])
    for old in block.rotary:
        ir.convenience.replace_all_uses_with(old.outputs[0], rotated[block.rotary.index(old)])
        graph.remove(old, safe=True)
    block.q, block.k, block.rotary = rotated[0], rotated[1], None


def remove_dead(graph: ir.Graph) -> None:
    """Drop nodes whose outputs nothing reads (the unpacked projections, the mask, the tables)
    and initializers nothing reads (the unpacked weights)."""
    outputs = set(graph.outputs)
    for node in reversed(list(graph)):
        if all(not o.uses() and o not in outputs for o in node.outputs):
            graph.remove(node, safe=True)
    for name, value in list(graph.initializers.items()):
        if not value.uses() and value not in outputs:
            del graph.initializers[name]
