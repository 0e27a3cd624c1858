"""diffusers' sinusoidal timestep embedding (``get_timestep_embedding``) as one component.

The function computes ``freqs = exp(-log(max_period) * arange(half) / (half - shift))``, then
``x = scale * t[:, None] * freqs[None, :]`` and ``cat([sin x, cos x], -1)``, with the halves
swapped when ``flip_sin_to_cos``. In the trace the frequencies are a dozen ops on no input
(``arange``, ``mul``, ``div``, ``exp``); the pattern evaluates them once at match time and emits
``Unsqueeze(t) * freqs [* scale]`` -> ``Sin``, ``Cos`` -> ``Concat`` (in the order the graph
has), with the frequencies one constant. Matched at the ``cat`` of ``sin(x)`` and ``cos(x)``;
declined where the frequencies depend on an input, or the embedding is not ``[batch, 2 * half]``.
An odd embedding size (a zero column padded on) leaves the padding lowered after the component.
"""

from __future__ import annotations

import torch
import torch.fx

from patterns.base import (
    NO_OPS,
    Claim,
    Decline,
    MatchContext,
    asserts_on,
    aten,
    is_op,
    module_of,
    only_user,
    skip_casts,
)

NAME = "timestep_embedding"
# ops the frequency subgraph is made of (no inputs: evaluated once when matched)
CONSTANT_OPS = (aten.arange, aten.mul, aten.div, aten.exp, aten.unsqueeze, aten.to,
                aten._to_copy, aten.neg, aten.add, aten.sub)  # fmt: skip
LAST = 9223372036854775807  # a slice to the end


def _constant_value(node: torch.fx.Node, nodes: set) -> torch.Tensor | None:
    """The value of ``node`` when it is computed from no graph input by CONSTANT_OPS (the nodes
    evaluated are added to ``nodes``), else None."""
    if not is_op(node, *CONSTANT_OPS):
        return None
    args = []
    for arg in node.args:
        if isinstance(arg, torch.fx.Node):
            value = _constant_value(arg, nodes)
            if value is None:
                return None
            args.append(value)
        else:
            args.append(arg)
    kwargs = {k: v for k, v in node.kwargs.items() if k not in ("device", "pin_memory")}
    if any(isinstance(v, torch.fx.Node) for v in kwargs.values()):
        return None
    nodes.add(node)
    return node.target(*args, **kwargs)


def _product(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.Tensor, float, set] | None:
    """(timesteps [batch, 1], frequencies [1, half], scale, nodes) when ``node`` is
    ``t[:, None] * freqs[None, :]``, optionally times a scalar."""
    scale, nodes = 1.0, {node}
    if is_op(node, aten.mul) and isinstance(node.args[1], (int, float)):
        scale, node = float(node.args[1]), node.args[0]
        nodes.add(node)
    if not is_op(node, aten.mul) or not all(isinstance(a, torch.fx.Node) for a in node.args[:2]):
        return None
    for t, f in (node.args[:2], tuple(reversed(node.args[:2]))):
        freqs = _constant_value(f, nodes)
        tval = t.meta.get("val")
        if freqs is None or tval is None or tval.dim() != 2 or freqs.dim() != 2:
            continue
        if freqs.shape[0] != 1 or not isinstance(tval.shape[1], int) or tval.shape[1] != 1:
            continue
        return t, freqs.to(torch.float32), scale, nodes
    return None


def _flip(cat: torch.fx.Node, half: int) -> torch.fx.Node | None:
    """The ``cat([emb[:, half:], emb[:, :half]])`` reading ``cat`` (the halves swapped)."""
    users = [u for u in cat.users if not is_op(u, *NO_OPS)]
    if len(users) != 2 or not all(is_op(u, aten.slice) for u in users):
        return None
    ends = []
    for user in users:
        second = only_user(user)
        inner = second if is_op(second, aten.slice) else user
        if inner is not user and tuple(user.args[1:]) not in ((0, 0, LAST), (0,)):
            return None
        ends.append((inner, tuple(inner.args[1:4])))
    joined = {only_user(inner) for inner, _ in ends}
    if len(joined) != 1 or not is_op(next(iter(joined)), aten.cat):
        return None
    flipped = next(iter(joined))
    parts = list(flipped.args[0])
    by_node = dict(ends)
    if len(parts) != 2 or any(p not in by_node for p in parts):
        return None
    if by_node[parts[0]] != (1, half, LAST) or by_node[parts[1]] != (1, 0, half):
        return None
    return flipped


def match(node: torch.fx.Node, context: MatchContext | None = None) -> Claim | Decline | None:
    if not is_op(node, aten.cat) or len(node.args[0]) != 2:
        return None
    sin, cos = node.args[0]
    if not (is_op(sin, aten.sin) and is_op(cos, aten.cos) and sin.args[0] is cos.args[0]):
        return None
    module = module_of(node)[0]
    val = node.meta.get("val")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if val is None or val.dim() != 2 or dim not in (-1, 1):
        return Decline(NAME, module, "sin and cos are not joined on the last axis of [batch, n]")
    found = _product(sin.args[0])
    if found is None:
        return Decline(NAME, module, "the angles are not timesteps times constant frequencies")
    t, freqs, scale, nodes = found
    half = int(freqs.shape[1])
    flipped = _flip(node, half)
    anchor = flipped if flipped is not None else node
    nodes |= {node, sin, cos}
    if flipped is not None:
        nodes |= {flipped, *flipped.args[0]}
        nodes |= {u for u in node.users if is_op(u, aten.slice)}
    nodes |= asserts_on(nodes)
    dtype = skip_casts(t).meta.get("val")

    def emit(ctx):
        steps = ctx.value(t)
        if t.meta["val"].dtype != torch.float32:
            steps = ctx.cast(steps, torch.float32)
        angles = ctx.op.Mul(steps, ctx.constant(freqs))
        if scale != 1.0:
            angles = ctx.op.Mul(angles, ctx.constant(scale, torch.float32))
        sines, cosines = ctx.op.Sin(angles), ctx.op.Cos(angles)
        parts = (cosines, sines) if flipped is not None else (sines, cosines)
        return ctx.op.Concat(*parts, axis=-1)

    attributes = {
        "frequencies": half, "flip_sin_to_cos": flipped is not None, "scale": scale,
        "timestep_dtype": str(dtype.dtype).removeprefix("torch.") if dtype is not None else None,
    }  # fmt: skip
    return Claim(NAME, "TimestepEmbedding", module, nodes, anchor, emit, attributes)
