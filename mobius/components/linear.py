"""Linear projection with the weight stored HF-style ``[out_features, in_features]``."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnxscript import nn

FLOAT = ir.DataType.FLOAT


def weight_or_param(
    value: ir.Value | None, shape: Sequence[int] | None, dtype: ir.DataType, what: str
) -> ir.Value:
    """``value`` when the caller already has one, else a new ``Parameter`` of ``shape``.

    The parameter is unnamed: assigning it to a module attribute names it after the attribute, so
    initializer names come out as HF state-dict keys.
    """
    if value is not None:
        return value
    if shape is None or any(d is None for d in shape):
        raise ValueError(
            f"{what}: give either the sizes to create the parameter or an existing ir.Value"
        )
    return nn.Parameter(list(shape), dtype=dtype)


class Linear(nn.Module):
    """``y = x @ W^T (+ b)`` as ``MatMul(x, Transpose(W))``.

    The weight keeps the HF layout ``[out, in]`` so its initializer is the checkpoint tensor unchanged;
    onnxruntime constant-folds the ``Transpose`` of an initializer when the session is created (at
    the cost of one transposed copy at load time). ``bias`` is a flag, or an existing bias value.
    """

    def __init__(
        self,
        in_features: int | None = None,
        out_features: int | None = None,
        bias: bool | ir.Value = False,
        *,
        weight: ir.Value | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.weight = weight_or_param(weight, [out_features, in_features], dtype, "Linear.weight")
        if isinstance(bias, ir.Value):
            self.bias = bias
        elif bias:
            self.bias = weight_or_param(None, [out_features], dtype, "Linear.bias")
        else:
            self.bias = None

    def forward(self, op, x):
        y = op.MatMul(x, op.Transpose(self.weight, perm=[1, 0]))
        if self.bias is not None:
            y = op.Add(y, self.bias)
        return y


def as_linear(
    value: ir.Value | Linear | None,
    in_features: int | None,
    out_features: int | None,
    bias: bool,
    dtype: ir.DataType,
) -> Linear:
    """A ``Linear`` from an existing module, an existing weight value (no bias), or sizes."""
    if isinstance(value, Linear):
        return value
    if value is not None:
        return Linear(weight=value)
    return Linear(in_features, out_features, bias, dtype=dtype)
