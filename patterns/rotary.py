"""Rotary embedding: x * cos + rotate_half(x) * sin -> one RotaryEmbedding op per q and k.

Matches, anywhere in the graph, ``add(mul(x, unsqueeze(cos)), mul(cat(-x2, x1), unsqueeze(sin)))``
with ``x1, x2`` the two halves of ``x``'s last axis (the llama layout; a partial rotary factor
shows up as ``x`` being a slice of q/k). The cos/sin tables stay as traced, so every rope scaling
type computes exactly what transformers computes; only their first half is fed to the op, which is
checked to be the table duplicated (``cat(freqs, freqs)``).
"""

from __future__ import annotations

import torch.fx

from mobius.components.rotary import ApplyRotary
from patterns.base import Claim, Decline, asserts_on, aten, is_op, module_of, skip_casts

INT64_MAX = 2**63 - 1


def match(anchor: torch.fx.Node, context: object = None) -> Claim | Decline | None:
    if not is_op(anchor, aten.add) or not all(is_op(a, aten.mul) for a in anchor.args[:2]):
        return None
    for cos_mul, sin_mul in (anchor.args[:2], reversed(anchor.args[:2])):
        found = _match_halves(cos_mul, sin_mul)
        if found is not None:
            break
    else:
        return None
    x, rotated_nodes, cos_table, sin_table, half = found
    module = _module(anchor)
    for table in (cos_table, sin_table):
        reason = _duplicated_table(table)
        if reason:
            return Decline("rotary", module, reason)
    nodes = {anchor, cos_mul, sin_mul, *rotated_nodes}
    nodes |= asserts_on(nodes)

    def emit(ctx):
        cos_half = _half_table(ctx, cos_table, half, like=x)
        sin_half = _half_table(ctx, sin_table, half, like=x)
        return ApplyRotary(name="rotary")(ctx.op, ctx.value(x), cos_half, sin_half)

    return Claim(
        "rotary",
        "ApplyRotary",
        module,
        nodes,
        anchor,
        emit,
        {"rotary_dim": 2 * half, "layout": "half"},
    )


def _match_halves(cos_mul: torch.fx.Node, sin_mul: torch.fx.Node):
    """(x, nodes of rotate_half, cos table, sin table, half) when the muls have the llama shape."""
    for x, cos_u in (cos_mul.args[:2], reversed(cos_mul.args[:2])):
        for rot, sin_u in (sin_mul.args[:2], reversed(sin_mul.args[:2])):
            if not (
                is_op(rot, aten.cat)
                and is_op(cos_u, aten.unsqueeze)
                and is_op(sin_u, aten.unsqueeze)
            ):
                continue
            if cos_u.args[1] != 1 or sin_u.args[1] != 1 or rot.args[1] not in (-1, 3):
                continue
            parts = rot.args[0]
            if len(parts) != 2 or not is_op(parts[0], aten.neg):
                continue
            upper, lower = parts[0].args[0], parts[1]
            val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
            if val is None or val.dim() != 4 or not isinstance(val.shape[-1], int):
                continue
            half = val.shape[-1] // 2
            if not (_is_slice(upper, x, half, INT64_MAX) and _is_slice(lower, x, 0, half)):
                continue
            return x, {rot, parts[0], upper, lower}, cos_u.args[0], sin_u.args[0], half
    return None


def _is_slice(node: object, source: torch.fx.Node, start: int, end: int) -> bool:
    if not is_op(node, aten.slice) or node.args[0] is not source:
        return False
    args = list(node.args) + [None] * 4
    dim, lo, hi, step = args[1], args[2] or 0, args[3], args[4] or 1
    hi = INT64_MAX if hi is None or hi >= 2**62 else hi
    end = INT64_MAX if end >= 2**62 else end
    return dim in (-1, 3) and lo == start and hi == end and step == 1


def _duplicated_table(table: torch.fx.Node) -> str | None:
    """None when ``table`` is cos/sin(cat(f, f)) (times a scalar); else why not."""
    node = skip_casts(table)
    while is_op(node, aten.mul) and isinstance(node.args[1], (int, float)):
        node = skip_casts(node.args[0])
    if not is_op(node, aten.cos, aten.sin):
        return "the rotary table is not cos/sin of the frequencies"
    emb = skip_casts(node.args[0])
    if not (is_op(emb, aten.cat) and len(emb.args[0]) == 2 and emb.args[0][0] is emb.args[0][1]):
        return "the rotary table is not the frequencies repeated twice (cat(f, f))"
    return None


def _half_table(
    ctx, table: torch.fx.Node, half: int, like: torch.fx.Node | None = None, like_value=None
):
    """table[..., :half], computed once per table and shared by every layer.

    A table traced with batch 1 (positions made by the model itself, as encoders without a
    ``position_ids`` input do) is broadcast by torch's mul; ONNX ``RotaryEmbedding`` needs the
    batch of ``like`` (the rotated tensor), so the table is expanded to it. ``like_value`` is its
    ONNX value where ``like`` itself is not emitted (q/k/v packed into one MatMul).
    """
    cache = ctx.state.setdefault("rotary_tables", {})
    key = (table, half)
    if key not in cache:
        cache[key] = ctx.op.Slice(ctx.value(table), ctx.ints([0]), ctx.ints([half]), ctx.ints([-1]))
    if like is None or not _broadcast_batch(table, like):
        return cache[key]
    expanded = (table, half, "expanded")
    if expanded not in cache:
        batch = ctx.op.Shape(ctx.value(like) if like_value is None else like_value, start=0, end=1)
        rest = ctx.op.Shape(cache[key], start=1)
        cache[expanded] = ctx.op.Expand(cache[key], ctx.op.Concat(batch, rest, axis=0))
    return cache[expanded]


def _broadcast_batch(table: torch.fx.Node, like: torch.fx.Node) -> bool:
    """Whether ``table`` has batch 1 where ``like`` may have another batch."""
    table_val, like_val = table.meta.get("val"), like.meta.get("val")
    if table_val is None or like_val is None or table_val.dim() == 0:
        return False
    table_batch, like_batch = table_val.shape[0], like_val.shape[0]
    return _is_one(table_batch) and not _is_one(like_batch)


def _is_one(size: object) -> bool:
    return isinstance(size, int) and size == 1


def _module(node: torch.fx.Node) -> str:
    return module_of(node)[0]
