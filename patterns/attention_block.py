"""The attention block in packed layout: no head reshapes or transposes around Attention.

HF splits q/k/v into heads (``view(b, s, -1, d).transpose(1, 2)``), rotates q and k, attends, and
merges heads back (``transpose(1, 2).reshape(b, s, -1)``, inside the captured op plus one reshape).
ONNX ``RotaryEmbedding`` and ``Attention`` both take the packed ``[batch, seq, heads * dim]`` layout
directly, so this pattern claims the whole chain from the three projections to the merged output
and emits two RotaryEmbedding (none for models without rope) and one Attention, nothing else. It declines (leaving the 4-D form of
patterns/attention.py and patterns/rotary.py) when anything sits between the head split and the
attention other than the llama-layout rotary on all of head_dim: QK-norm, partial or interleaved
rotary, a split that is not a plain view.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from mobius.components.rotary import ApplyRotary
from patterns import rotary
from patterns.attention import AttentionCall, attend
from patterns.base import Claim, Decline, asserts_on, aten, is_op, only_user

VIEWS = (aten.view, aten.reshape, aten._unsafe_view)


@dataclass
class PackedInput:
    """One of q/k/v traced back to its packed [batch, seq, heads * dim] source."""

    source: torch.fx.Node
    nodes: set[torch.fx.Node]
    tables: tuple[torch.fx.Node, torch.fx.Node, int] | None  # cos, sin, half: rotated if set


def _packed(arg: torch.fx.Node, rotate: bool) -> PackedInput | str:
    """Trace q/k/v back through (rotary,) transpose(1, 2) and the head-splitting view."""
    nodes: set[torch.fx.Node] = set()
    tables = None
    if rotate and is_op(arg, aten.add):
        found = rotary.match(arg)
        if (
            not isinstance(found, Claim)
            or found.attributes["rotary_dim"] != arg.meta["val"].shape[-1]
        ):
            return "the rotary embedding is not the llama layout over the whole head"
        x, _, cos_table, sin_table, half = _halves(found)
        nodes |= found.nodes
        tables = (cos_table, sin_table, half)
        arg = x
    if not (is_op(arg, aten.transpose) and tuple(sorted(a % 4 for a in arg.args[1:3])) == (1, 2)):
        return "the heads are not split by a transpose(1, 2)"
    view = arg.args[0]
    if not is_op(view, *VIEWS) or view.meta["val"].dim() != 4:
        return "the heads are not split by a view to [batch, seq, heads, dim]"
    source = view.args[0]
    if source.meta["val"].dim() != 3:
        return "the projection output is not [batch, seq, hidden]"
    nodes |= {arg, view}
    return PackedInput(source, nodes, tables)


def _halves(claim: Claim):
    add = claim.anchor
    for cos_mul, sin_mul in (add.args[:2], tuple(reversed(add.args[:2]))):
        found = rotary._match_halves(cos_mul, sin_mul)
        if found is not None:
            return found
    raise AssertionError("rotary claim without halves")


def match(node: torch.fx.Node, context: object = None) -> Claim | Decline | None:
    if node.op != "call_function" or node.target is not torch.ops.mobius.attention.default:
        return None
    module = rotary._module(node)
    merge = only_user(node)
    if not (is_op(merge, *VIEWS) and merge.meta["val"].dim() == 3):
        return Decline(
            "attention_block",
            module,
            "the attention output is not merged back to [batch, seq, hidden]",
        )
    inputs = []
    for arg, rotate in zip(node.args[:3], (True, True, False), strict=True):
        found = _packed(arg, rotate)
        if isinstance(found, str):
            return Decline("attention_block", module, found)
        inputs.append(found)
    q, k, v = inputs
    if (q.tables is None) != (k.tables is None):
        return Decline("attention_block", module, "q and k are not rotated alike")
    nodes = {node, merge, *q.nodes, *k.nodes, *v.nodes}
    nodes |= asserts_on(nodes)

    def emit(ctx):
        call = AttentionCall.of(ctx, node)
        query = _rotated(ctx, q, call.q_heads)
        key = _rotated(ctx, k, call.kv_heads)
        length = ctx.op.Shape(ctx.value(q.source), start=1, end=2)
        return attend(ctx, call, query, key, ctx.value(v.source), length, packed=True)

    return Claim("attention_block", "Attention", module, nodes, merge, emit, {"layout": "packed"})


def _rotated(ctx, packed: PackedInput, heads: int):
    if packed.tables is None:
        return ctx.value(packed.source)
    cos_table, sin_table, half = packed.tables
    cos_half = rotary._half_table(ctx, cos_table, half, packed.source)
    sin_half = rotary._half_table(ctx, sin_table, half, packed.source)
    return ApplyRotary(num_heads=heads, name="rotary")(
        ctx.op, ctx.value(packed.source), cos_half, sin_half
    )
