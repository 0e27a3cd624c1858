"""Several linear layers of one input as one MatMul: their weights packed side by side, lazily.

``x W_q^T``, ``x W_k^T`` and ``x W_v^T`` are the column blocks of ``x [W_q; W_k; W_v]^T``, so one
MatMul (and one bias Add) followed by a Split computes all three. The packed initializer is made
only when the model is saved, from the checkpoint tensors, and records where it came from.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from lowering.context import LoweringContext
from lowering.transposed import TransposedTensor

# packing copies the weights; only plain float types (quantized layouts have their own blocks)
PACKABLE = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


class _StackedRows:
    """The row-wise concatenation of 2-D (or, for biases, 1-D) tensors, read on demand."""

    def __init__(self, sources: list[ir.TensorProtocol]) -> None:
        self.sources = sources
        self.dtype = sources[0].dtype
        rows = sum(int(s.shape[0]) for s in sources)
        self.shape = ir.Shape([rows, *(int(d) for d in sources[0].shape[1:])])

    def numpy(self) -> np.ndarray:
        return np.concatenate([s.numpy() for s in self.sources], axis=0)


def packable(values: list[ir.Value]) -> bool:
    """Initializers with values, of one float dtype and one width, that can be stacked."""
    tensors = [v.const_value for v in values]
    if any(t is None or not v.is_initializer() for v, t in zip(values, tensors, strict=True)):
        return False
    return (
        len({t.dtype for t in tensors}) == 1
        and tensors[0].dtype in PACKABLE
        and len({tuple(int(d) for d in t.shape[1:]) for t in tensors}) == 1
    )


def _source_keys(values: list[ir.Value]) -> str:
    return ",".join(
        v.const_value.metadata_props.get("mobius.source_key", v.name or "") for v in values
    )


def _register(ctx: LoweringContext, tensor: ir.TensorProtocol, name: str) -> ir.Value:
    value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=tensor.shape)
    value.const_value = tensor
    ctx.op.builder.graph.register_initializer(value)
    return value


def packed_linear(
    ctx: LoweringContext,
    x: ir.Value,
    weights: list[ir.Value],
    biases: list[ir.Value] | None,
    name: str,
) -> list[ir.Value]:
    """``[x W_i^T + b_i for each i]`` as MatMul (+ Add) + Split; ``weights`` must be ``packable``.

    The packed weight is stored transposed as ``<name>.weight.T``, the bias as ``<name>.bias``.
    """
    stacked = _StackedRows([w.const_value for w in weights])
    weight = TransposedTensor(stacked, name=f"{name}.weight.T")
    weight.metadata_props["mobius.source_keys"] = _source_keys(weights)
    weight.metadata_props["mobius.transform"] = "concat_rows,transpose"
    y = ctx.op.MatMul(x, _register(ctx, weight, f"{name}.weight.T"))
    if biases is not None:
        rows = _StackedRows([b.const_value for b in biases])
        bias = ir.LazyTensor(
            lambda: ir.tensor(rows.numpy()), dtype=rows.dtype, shape=rows.shape, name=f"{name}.bias"
        )
        bias.metadata_props["mobius.source_keys"] = _source_keys(biases)
        bias.metadata_props["mobius.transform"] = "concat"
        y = ctx.op.Add(y, _register(ctx, bias, f"{name}.bias"))
    widths = [int(w.const_value.shape[0]) for w in weights]
    return list(ctx.op.Split(y, ctx.ints(widths), axis=-1, _outputs=len(weights)))
