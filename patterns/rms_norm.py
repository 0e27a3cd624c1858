"""RMSNorm: x * rsqrt(mean(x^2, -1) + eps) * w, or * (1 + w) (Gemma) -> RMSNormalization.

Matches the aten structure of a whole module region: optional cast to f32, pow(2) (or square:
torch.export keeps it, and it is lowered without a re-trace), mean(-1),
add(eps), rsqrt, mul, optional cast back, mul by the weight (or by ``1 + weight``).
"""

from __future__ import annotations

import torch.fx

from mobius.components.norms import RMSNorm
from patterns.base import (
    CASTS,
    NO_OPS,
    Claim,
    Decline,
    Region,
    asserts_on,
    aten,
    is_op,
    only_user,
    skip_casts,
)


def match(region: Region) -> Claim | Decline | None:
    rsqrts = [n for n in region.nodes if is_op(n, aten.rsqrt)]
    if len(rsqrts) != 1:
        return None
    rsqrt = rsqrts[0]
    add_eps = rsqrt.args[0]
    if not (is_op(add_eps, aten.add) and isinstance(add_eps.args[1], float)):
        return Decline("rms_norm", region.path, "rsqrt does not take mean(x^2) + eps")
    mean = add_eps.args[0]
    if not (
        is_op(mean, aten.mean)
        and list(mean.args[1]) in ([-1],)
        and (mean.args[2] if len(mean.args) > 2 else mean.kwargs.get("keepdim"))
    ):
        return Decline(
            "rms_norm", region.path, "the variance is not a keepdim mean over the last axis"
        )
    square = mean.args[0]
    if not (is_op(square, aten.pow) and square.args[1] == 2 or is_op(square, aten.square)):
        return Decline("rms_norm", region.path, "the variance is not mean(x ** 2)")
    x_f = square.args[0]
    normed = next((u for u in rsqrt.users if is_op(u, aten.mul) and x_f in u.args), None)
    if normed is None:
        return Decline("rms_norm", region.path, "x is not multiplied by the rsqrt")
    out = _through_casts(normed)
    scale_mul = next((u for u in out.users if is_op(u, aten.mul)), None)
    if scale_mul is None:
        return Decline("rms_norm", region.path, "no weight multiplies the normalised value")
    weight_expr = scale_mul.args[0] if scale_mul.args[1] is out else scale_mul.args[1]
    weight, offset = _weight(weight_expr)
    if weight is None:
        return Decline("rms_norm", region.path, "the scale is not a weight or 1 + weight")
    scale_mul = _through_casts(scale_mul)
    x = skip_casts(x_f)
    leading = set()  # casts of the input stay: the residual path may read them too
    node = x_f
    while is_op(node, *CASTS):
        leading.add(node)
        node = node.args[0]
    nodes = {
        n
        for n in region.nodes
        if n not in leading and not (is_op(n, *NO_OPS) and n.args[0] in leading)
    }
    nodes |= asserts_on(nodes)
    eps = float(add_eps.args[1])

    def emit(ctx):
        component = RMSNorm(eps=eps, offset=offset, weight=ctx.value(weight), name="rms_norm")
        y = component(ctx.op, ctx.value(x))
        out_dtype = ctx.torch_dtype(scale_mul)
        return y if ctx.torch_dtype(x) == out_dtype else ctx.cast(y, out_dtype)

    if scale_mul not in nodes:
        return Decline("rms_norm", region.path, "the weight multiply lies outside the module")
    return Claim(
        pattern="rms_norm",
        component="RMSNorm",
        module=region.path,
        nodes=nodes,
        anchor=scale_mul,
        emit=emit,
        attributes={"eps": eps, "offset": offset},
    )


def _through_casts(node: torch.fx.Node) -> torch.fx.Node:
    """Follow single-user dtype casts forward."""
    while (user := only_user(node)) is not None and is_op(user, *CASTS):
        node = user
    return node


def _weight(expr: object) -> tuple[torch.fx.Node | None, float]:
    expr = skip_casts(expr)
    if isinstance(expr, torch.fx.Node) and expr.op == "placeholder":
        return expr, 0.0
    if is_op(expr, aten.add):
        a, b = expr.args[0], expr.args[1]
        for tensor, scalar in ((a, b), (b, a)):
            tensor = skip_casts(tensor)
            if (
                isinstance(scalar, (int, float))
                and isinstance(tensor, torch.fx.Node)
                and tensor.op == "placeholder"
            ):
                return tensor, float(scalar)
    return None, 0.0
