"""Ops whose output size depends on the data: runs of equal values.

``unique_consecutive`` appears in transformers' checks of a batch's layout (BART's and T5's
sequence classifiers check that every row has as many EOS tokens); its size feeds only the check.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch
import torch.fx

from lowering.context import INT64, LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.unique_consecutive)
def unique_consecutive(ctx: LoweringContext, node: torch.fx.Node):
    """The first element of every run of equal values, of a flattened input (``dim=None``).

    A value is kept when it differs from the one before it; the first always is."""
    return_inverse = node.args[1] if len(node.args) > 1 else node.kwargs.get("return_inverse")
    return_counts = node.args[2] if len(node.args) > 2 else node.kwargs.get("return_counts")
    dim = node.args[3] if len(node.args) > 3 else node.kwargs.get("dim")
    if return_inverse or return_counts or dim is not None:
        raise NotImplementedError("unique_consecutive with return_inverse, return_counts or dim")
    op = ctx.op
    flat = op.Reshape(ctx.value(node.args[0]), op.Constant(value=ir.tensor([-1], dtype=INT64)))
    one = op.Constant(value=ir.tensor([1], dtype=INT64))
    start = op.Constant(value=ir.tensor([0], dtype=INT64))
    end = op.Constant(value=ir.tensor([-1], dtype=INT64))
    huge = op.Constant(value=ir.tensor([2**62], dtype=INT64))
    changed = op.Not(op.Equal(op.Slice(flat, one, huge), op.Slice(flat, start, end)))
    first = op.Constant(value=ir.tensor(np.ones(1, dtype=bool)))
    # cut to the input's length: an empty input keeps nothing (not the "first" element)
    keep = op.Slice(op.Concat(first, changed, axis=0), start, op.Shape(flat))
    # torch returns (values, inverse, counts); the last two are empty when not asked for
    nothing = op.Constant(value=ir.tensor(np.zeros(0, dtype=np.int64)))
    return op.Compress(flat, keep, axis=0), nothing, nothing
