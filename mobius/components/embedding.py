"""Token embeddings (Gather, optional scale) and learned absolute position embeddings."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import weight_or_param

FLOAT = ir.DataType.FLOAT


class Embedding(nn.Module):
    """``weight[input_ids] * scale``; ``weight`` is ``[vocab, hidden]``.

    ``scale`` (Gemma's ``sqrt(hidden)``) is rounded to the weight's type before the multiply, as HF
    does with its ``embed_scale`` buffer.
    """

    def __init__(
        self,
        num_embeddings: int | None = None,
        embedding_dim: int | None = None,
        scale: float | None = None,
        *,
        weight: ir.Value | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.scale = scale
        self.weight = weight_or_param(
            weight, [num_embeddings, embedding_dim], dtype, "Embedding.weight"
        )

    def forward(self, op, input_ids):
        y = op.Gather(self.weight, input_ids, axis=0)
        if self.scale is not None and self.scale != 1.0:
            y = op.Mul(
                y, op.CastLike(op.Constant(value=ir.tensor(float(self.scale), dtype=FLOAT)), y)
            )
        return y


class LearnedPositions(nn.Module):
    """``weight[position_ids + offset]`` (OPT stores two extra rows, so its offset is 2)."""

    def __init__(
        self,
        num_embeddings: int | None = None,
        embedding_dim: int | None = None,
        offset: int = 0,
        *,
        weight: ir.Value | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.offset = offset
        self.weight = weight_or_param(
            weight, [num_embeddings, embedding_dim], dtype, "LearnedPositions.weight"
        )

    def forward(self, op, position_ids):
        if self.offset:
            position_ids = op.Add(
                position_ids, op.Constant(value=ir.tensor(self.offset, dtype=ir.DataType.INT64))
            )
        return op.Gather(self.weight, position_ids, axis=0)
