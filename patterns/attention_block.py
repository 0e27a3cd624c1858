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

from lowering.linalg import linear
from lowering.packed import packable, packed_linear
from mobius.components.rotary import ApplyRotary
from patterns import rotary
from patterns.attention import AttentionCall, attend
from patterns.base import Claim, Decline, asserts_on, aten, is_op, only_user, placeholder_users

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
    # bidirectional blocks also take the three projections, to run them as one MatMul
    projections = None if node.args[5] else _projections([q.source, k.source, v.source])
    if projections is not None:
        nodes |= set(projections)
    nodes |= asserts_on(nodes)

    def emit(ctx):
        call = AttentionCall.of(ctx, node)
        sources = _project(ctx, projections, module) if projections else None
        sources = sources or [ctx.value(p.source) for p in (q, k, v)]
        query = _rotated(ctx, q, sources[0], call.q_heads)
        key = _rotated(ctx, k, sources[1], call.kv_heads)
        length = ctx.op.Shape(sources[0], start=1, end=2)
        return attend(ctx, call, query, key, sources[2], length, packed=True)

    attributes = {"layout": "packed", "packed_projections": projections is not None}
    return Claim("attention_block", "Attention", module, nodes, merge, emit, attributes)


def _projections(sources: list[torch.fx.Node]) -> list[torch.fx.Node] | None:
    """The q/k/v ``linear`` nodes when they read one input and weights nothing else reads, with a
    bias on all three or on none (else None: they stay three MatMuls)."""
    if not all(is_op(s, aten.linear) for s in sources) or len({s.args[0] for s in sources}) != 1:
        return None
    weights = [s.args[1] for s in sources]
    biases = [s.args[2] if len(s.args) > 2 else s.kwargs.get("bias") for s in sources]
    if not all(placeholder_users(w) == 1 for w in weights):
        return None
    if len({b is None for b in biases}) != 1 or not all(
        b is None or placeholder_users(b) == 1 for b in biases
    ):
        return None
    return sources


def _project(ctx, projections: list[torch.fx.Node], module: str):
    """The three projections as one MatMul where the weights are initializers (else each alone)."""
    weights = [ctx.value(p.args[1]) for p in projections]
    biases = [p.args[2] if len(p.args) > 2 else p.kwargs.get("bias") for p in projections]
    bias_values = None if biases[0] is None else [ctx.value(b) for b in biases]
    if not packable(weights) or (bias_values is not None and not packable(bias_values)):
        return [linear(ctx, p) for p in projections]
    parts = [(w.name or "").rsplit(".", 2) for w in weights]  # owner, layer, "weight"
    name = f"{module}.qkv"
    if all(len(p) == 3 for p in parts) and len({p[0] for p in parts}) == 1:
        name = f"{parts[0][0]}.{'+'.join(p[1] for p in parts)}"  # ...self.query+key+value
    return packed_linear(ctx, ctx.value(projections[0].args[0]), weights, bias_values, name)


def _rotated(ctx, packed: PackedInput, source, heads: int):
    if packed.tables is None:
        return source
    cos_table, sin_table, half = packed.tables
    cos_half = rotary._half_table(ctx, cos_table, half, like=packed.source, like_value=source)
    sin_half = rotary._half_table(ctx, sin_table, half, like=packed.source, like_value=source)
    return ApplyRotary(num_heads=heads, name="rotary")(ctx.op, source, cos_half, sin_half)
