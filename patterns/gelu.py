"""GELU written out in Python -> one ONNX ``Gelu`` (opset 20).

``torch.nn.functional.gelu`` already lowers to ``Gelu``. Some models spell the formula out instead
(transformers' ``NewGELUActivation``, "gelu_new", and ``GELUActivation(use_gelu_python=True)``):

- erf form:  ``x * 0.5 * (1 + erf(x / sqrt(2)))``                        -> ``Gelu``
- tanh form: ``x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))`` -> ``Gelu(approximate="tanh")``

Matched at the final multiply, the halving in either operand order; the constants must be the
formula's (within 1e-6), else nothing is claimed.
"""

from __future__ import annotations

import math

import torch.fx

from patterns.base import Claim, asserts_on, aten, is_op, module_of

SQRT_2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


def _near(value: object, expected: float) -> bool:
    return isinstance(value, (int, float)) and abs(float(value) - expected) <= 1e-6


def _scaled(node: object, target, factor: float) -> torch.fx.Node | None:
    """``x`` when ``node`` is ``target(x, factor)`` or ``target(factor, x)`` (mul only)."""
    if not is_op(node, target):
        return None
    a, b = node.args[:2]
    if _near(b, factor) and isinstance(a, torch.fx.Node):
        return a
    if target is aten.mul and _near(a, factor) and isinstance(b, torch.fx.Node):
        return b
    return None


def _divided_by_sqrt2(node: object) -> torch.fx.Node | None:
    return _scaled(node, aten.div, SQRT_2) or _scaled(node, aten.mul, 1.0 / SQRT_2)


def _inner(node: torch.fx.Node, x: torch.fx.Node) -> tuple[str, set[torch.fx.Node]] | None:
    """(approximate, nodes) when ``node`` is erf(x / sqrt 2) or tanh(sqrt(2/pi) (x + c x^3))."""
    if is_op(node, aten.erf):
        scaled = node.args[0]
        if _divided_by_sqrt2(scaled) is x:
            return "none", {node, scaled}
        return None
    if not is_op(node, aten.tanh):
        return None
    scaled = node.args[0]
    total = _scaled(scaled, aten.mul, SQRT_2_OVER_PI)
    if not is_op(total, aten.add) or len(total.args) != 2:
        return None
    for first, cubic in (total.args, tuple(reversed(total.args))):
        cube = _scaled(cubic, aten.mul, CUBIC)
        if first is x and is_op(cube, aten.pow) and cube.args[0] is x and _near(cube.args[1], 3):
            return "tanh", {node, scaled, total, cubic, cube}
    return None


def match(anchor: torch.fx.Node, context: object = None) -> Claim | None:
    if not is_op(anchor, aten.mul) or len(anchor.args) != 2:
        return None
    for half, bracket in (anchor.args, tuple(reversed(anchor.args))):
        x = _scaled(half, aten.mul, 0.5)
        if x is None or not is_op(bracket, aten.add) or len(bracket.args) != 2:
            continue
        for inner, one in (bracket.args, tuple(reversed(bracket.args))):
            found = _near(one, 1.0) and isinstance(inner, torch.fx.Node) and _inner(inner, x)
            if found:
                approximate, nodes = found
                nodes = {anchor, half, bracket, *nodes}
                nodes |= asserts_on(nodes)

                def emit(ctx, x=x, approximate=approximate):
                    return ctx.op.Gelu(ctx.value(x), approximate=approximate)

                return Claim(
                    "gelu", "Gelu", module_of(anchor)[0], nodes, anchor, emit,
                    {"approximate": approximate},
                )  # fmt: skip
    return None
