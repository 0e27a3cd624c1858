"""RMSNorm (ONNX RMSNormalization-23) and LayerNorm (ONNX LayerNormalization)."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import weight_or_param

FLOAT = ir.DataType.FLOAT


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * (offset + weight)`` over the last axis.

    Normalisation is computed in float32 (``stash_type=1``) whatever the input type, as HF does.
    With ``offset`` (Gemma's ``1 + weight``) the scale is also formed and applied in float32 and the
    result cast back to the input type, matching HF's ``(norm(x.float()) * (1 + w.float())).type_as(x)``.
    Works per head too (qwen3's q/k norm): pass ``[..., heads, head_dim]`` with a ``[head_dim]`` weight.
    """

    def __init__(
        self,
        hidden_size: int | None = None,
        eps: float = 1e-6,
        offset: float = 0.0,
        *,
        weight: ir.Value | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.eps = eps
        self.offset = offset
        self.weight = weight_or_param(weight, [hidden_size], dtype, "RMSNorm.weight")

    def forward(self, op, x):
        if not self.offset:
            return op.RMSNormalization(
                x, self.weight, axis=-1, epsilon=float(self.eps), stash_type=1
            )
        scale = op.Add(
            op.Cast(self.weight, to=FLOAT),
            op.Constant(value=ir.tensor(float(self.offset), dtype=FLOAT)),
        )
        y = op.RMSNormalization(
            op.Cast(x, to=FLOAT), scale, axis=-1, epsilon=float(self.eps), stash_type=1
        )
        return op.CastLike(y, x)


class LayerNorm(nn.Module):
    """``(x - mean) / sqrt(var + eps) * weight (+ bias)`` over the last axis.

    ``bias`` is a flag or an existing value. Statistics are kept in float32 (``stash_type=1``).
    """

    def __init__(
        self,
        hidden_size: int | None = None,
        eps: float = 1e-5,
        bias: bool | ir.Value = True,
        *,
        weight: ir.Value | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.eps = eps
        self.weight = weight_or_param(weight, [hidden_size], dtype, "LayerNorm.weight")
        if isinstance(bias, ir.Value):
            self.bias = bias
        elif bias:
            self.bias = weight_or_param(None, [hidden_size], dtype, "LayerNorm.bias")
        else:
            self.bias = None

    def forward(self, op, x):
        inputs = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return op.LayerNormalization(*inputs, axis=-1, epsilon=float(self.eps), stash_type=1)
