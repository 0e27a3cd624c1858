"""Triangular solves without a loop: the inverse of I + N for nilpotent N, in log2(n) products.

A triangular ``A = D (I + N)`` with ``N = D⁻¹ · (strict triangle)``, which is nilpotent
(``Nⁿ = 0``), so ``(I + N)⁻¹ = (I - N)(I + N²)(I + N⁴)…`` exactly, with ``ceil(log2 n)`` factors.
Models write such solves as a Python loop of ``n`` row updates when exporting (gated delta-rule
chunks); this is a dozen matrix products for ``n = 64`` instead.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.linalg_solve_triangular)
def solve_triangular(ctx: LoweringContext, node: torch.fx.Node):
    """X with ``A X = B`` (``left``) or ``X A = B``, for a lower or upper triangular ``A``."""
    a, b = node.args[0], node.args[1]
    upper = node.kwargs.get("upper", node.args[2] if len(node.args) > 2 else None)
    left = node.kwargs.get("left", True)
    unit = node.kwargs.get("unitriangular", False)
    size = _static_size(ctx.val(a).shape[-1])
    matrix, dtype = ctx.value(a), ctx.out_dtype(node)
    eye = ctx.constant(np.eye(size, dtype=np.float32), dtype)
    strict = ctx.op.Trilu(matrix, ctx.scalar_int(1 if upper else -1), upper=int(bool(upper)))
    if unit:
        nilpotent, inverse_diagonal = strict, None
    else:
        diagonal = ctx.op.ReduceSum(ctx.op.Mul(matrix, eye), ctx.ints([-1]), keepdims=1)
        inverse_diagonal = ctx.op.Reciprocal(diagonal)  # [..., n, 1]: one entry per row
        nilpotent = ctx.op.Mul(strict, inverse_diagonal)
    power = ctx.op.Neg(nilpotent)
    inverse = ctx.op.Add(eye, power)
    for _ in range(max(0, math.ceil(math.log2(size)) - 1) if size > 1 else 0):
        power = ctx.op.MatMul(power, power)
        inverse = ctx.op.MatMul(inverse, ctx.op.Add(eye, power))
    if inverse_diagonal is not None:  # (I + N)⁻¹ D⁻¹: scale column j by 1 / d_j
        columns = ctx.op.Unsqueeze(ctx.op.Squeeze(inverse_diagonal, ctx.ints([-1])), ctx.ints([-2]))
        inverse = ctx.op.Mul(inverse, columns)
    rhs = ctx.value(b)
    return ctx.op.MatMul(inverse, rhs) if left else ctx.op.MatMul(rhs, inverse)


def _static_size(size: int | torch.SymInt) -> int:
    """The matrix size as an int; a symbolic one must take one value for every input length.

    Chunked models reshape a padded length into chunks, and sympy cannot always reduce
    ``(s + pad(s)) // ((s + pad(s)) // 64)`` to 64: such an expression is evaluated over more
    than two periods of every free symbol (1..256) and accepted only if it never changes.
    """
    if isinstance(size, int):
        return size
    expr = size.node.expr
    values = {int(expr.subs(dict.fromkeys(expr.free_symbols, n))) for n in range(1, 257)}
    if len(values) != 1:
        raise ValueError(f"triangular solve needs a matrix of static size, not {size}")
    return values.pop()
