"""The masks and attention of an encoder–decoder's graphs: the encoder's padded self-attention,
the decoder's causal self-attention over its growing cache, and cross-attention over the encoder's
padded positions, each one ONNX ``Attention``-23 whose additive mask may carry a bias (T5's
relative positions)."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.attention import Attention, PaddingMask

INT64 = ir.DataType.INT64


def _ints(op, values: list[int]):
    return op.Constant(value=ir.tensor(values, dtype=INT64))


class TrailingCausalMask(nn.Module):
    """Additive ``[1, 1, q_len, keys]`` mask with no padding: the queries are the last ``q_len``
    of the ``keys`` positions (new tokens after a cache), and each sees itself and what precedes
    it. Disallowed positions get the dtype's lowest finite value."""

    def forward(self, op, query_length, key_length, dtype: ir.DataType, lowest: float):
        zero, one = op.Squeeze(_ints(op, [0])), op.Squeeze(_ints(op, [1]))
        total = op.Squeeze(key_length)
        key_pos = op.Range(zero, total, one)  # [T]
        query_pos = op.Range(op.Sub(total, op.Squeeze(query_length)), total, one)  # [S]
        rel = op.Sub(op.Unsqueeze(query_pos, _ints(op, [1])), op.Unsqueeze(key_pos, _ints(op, [0])))
        allowed = op.GreaterOrEqual(rel, zero)  # [S, T]
        zero_f = op.Constant(value=ir.tensor(0.0, dtype=dtype))
        low_f = op.Constant(value=ir.tensor(lowest, dtype=dtype))
        return op.Unsqueeze(op.Where(allowed, zero_f, low_f), _ints(op, [0, 1]))


class Seq2SeqMask(nn.Module):
    """The additive mask of one kind of call: causal over the keys (decoder self-attention),
    padding of the encoder's positions (encoder self-attention, cross-attention), or none."""

    def __init__(self, causal: bool, name: str | None = None) -> None:
        super().__init__(name)
        self.causal = causal

    def forward(self, op, padding, query_length, key_length, dtype: ir.DataType, lowest: float):
        if self.causal:
            return TrailingCausalMask(name="causal")(op, query_length, key_length, dtype, lowest)
        if padding is None:
            return None
        return PaddingMask(name="padding")(op, padding, query_length, dtype, lowest)


class BiasedAttention(nn.Module):
    """``Attention`` whose additive mask is the call's mask plus an additive bias (either may be
    absent): ``softmax(Q K^T * scale + bias + mask) V``."""

    def __init__(self, scale: float, softcap: float = 0.0, name: str | None = None) -> None:
        super().__init__(name)
        self.attention = Attention(scale, softcap, name="attention")

    def forward(self, op, query, key, value, mask, bias=None):
        if bias is not None:
            mask = bias if mask is None else op.Add(mask, bias)
        return self.attention(op, query, key, value, mask)[0]
