"""Special functions ONNX has no operator for."""

from __future__ import annotations

import math

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten

# Giles' single-precision erfinv: a polynomial in w = -log(1 - x²), one set of coefficients for
# the centre (w < 5) and one for the tails, highest degree first.
_CENTRE = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
           -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)  # fmt: skip
_TAILS = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
          -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)  # fmt: skip


@lowers(aten.erfinv)
def erfinv(ctx: LoweringContext, node: torch.fx.Node):
    """The inverse error function: the polynomial estimate, then one Newton step on ``erf``."""
    dtype = ctx.out_dtype(node)
    op, c = ctx.op, (lambda v: ctx.constant(v, torch.float32))
    x = ctx.cast(ctx.value(node.args[0]), torch.float32)
    w = op.Neg(op.Log(op.Mul(op.Sub(c(1.0), x), op.Add(c(1.0), x))))
    centre = _horner(ctx, op.Sub(w, c(2.5)), _CENTRE)
    tails = _horner(ctx, op.Sub(op.Sqrt(w), c(3.0)), _TAILS)
    y = op.Mul(op.Where(op.Less(w, c(5.0)), centre, tails), x)
    # Newton: y -= (erf(y) - x) / erf'(y), with erf'(y) = 2/sqrt(pi) exp(-y²)
    slope = op.Mul(c(2.0 / math.sqrt(math.pi)), op.Exp(op.Neg(op.Mul(y, y))))
    refined = op.Sub(y, op.Div(op.Sub(op.Erf(y), x), slope))
    edge = op.Mul(x, c(math.inf))  # erfinv(±1) = ±inf
    return ctx.cast(op.Where(op.Equal(op.Abs(x), c(1.0)), edge, refined), dtype)


def _horner(ctx: LoweringContext, w, coefficients: tuple[float, ...]):
    result = ctx.constant(coefficients[0], torch.float32)
    for coefficient in coefficients[1:]:
        result = ctx.op.Add(ctx.op.Mul(result, w), ctx.constant(coefficient, torch.float32))
    return result
