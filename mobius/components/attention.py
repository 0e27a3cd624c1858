"""Attention (with a KV cache or without), as ONNX Attention-23, and the masks it takes: the
padding-aware causal mask of decoders and the padding-only mask of encoders."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

INT64 = ir.DataType.INT64


def _ints(op, values: list[int]):
    return op.Constant(value=ir.tensor(values, dtype=INT64))


class CausalMask(nn.Module):
    """Additive mask [batch, 1, q_len, total_len] from the 2-D padding mask.

    A query at absolute position ``past + i`` may see key ``j`` when ``j <= past + i``, the key is not
    padding, and (with a sliding window ``w``) ``past + i - j < w``. Disallowed positions get the
    dtype's lowest finite value rather than -inf, so a fully padded query row stays finite instead of
    turning into NaN that would leak through the cache.
    """

    def __init__(self, window: int = 0, name: str | None = None) -> None:
        super().__init__(name)
        self.window = window

    def forward(self, op, attention_mask, query_length, dtype: ir.DataType, lowest: float):
        total = op.Shape(attention_mask, start=1, end=2)
        past = op.Sub(total, query_length)
        zero = _ints(op, [0])
        one = _ints(op, [1])
        key_pos = op.Range(op.Squeeze(zero), op.Squeeze(total), op.Squeeze(one))  # [T]
        query_pos = op.Range(op.Squeeze(past), op.Squeeze(total), op.Squeeze(one))  # [S]
        rel = op.Sub(op.Unsqueeze(query_pos, one), op.Unsqueeze(key_pos, zero))  # [S, T]: q - k
        allowed = op.GreaterOrEqual(rel, op.Squeeze(zero))
        if self.window:
            allowed = op.And(
                allowed, op.Less(rel, op.Constant(value=ir.tensor(self.window, dtype=INT64)))
            )
        not_padding = op.Cast(
            op.Unsqueeze(attention_mask, _ints(op, [1, 2])), to=ir.DataType.BOOL
        )  # [B,1,1,T]
        allowed = op.And(op.Unsqueeze(allowed, zero), not_padding)  # [B, 1, S, T]
        zero_f = op.Constant(value=ir.tensor(0.0, dtype=dtype))
        low_f = op.Constant(value=ir.tensor(lowest, dtype=dtype))
        return op.Where(allowed, zero_f, low_f)


class PaddingMask(nn.Module):
    """Additive mask [batch, 1, q_len, keys] from the 2-D padding mask, for bidirectional attention.

    Every query sees every non-padding key (the rows are equal; onnxruntime wants the query axis
    spelled out). Padding keys get the dtype's lowest finite value (not -inf): a row whose keys are
    all padding then averages them instead of turning into NaN.
    """

    def forward(self, op, attention_mask, query_length, dtype: ir.DataType, lowest: float):
        # leading axes fold into the batch, as the model folds them (multiple choice's
        # [batch, choices, seq] runs as [batch * choices, seq])
        rows_2d = op.Concat(_ints(op, [-1]), op.Shape(attention_mask, start=-1), axis=0)
        mask_2d = op.Reshape(attention_mask, rows_2d)
        keep = op.Cast(op.Unsqueeze(mask_2d, _ints(op, [1, 2])), to=ir.DataType.BOOL)
        zero_f = op.Constant(value=ir.tensor(0.0, dtype=dtype))
        low_f = op.Constant(value=ir.tensor(lowest, dtype=dtype))
        rows = op.Concat(_ints(op, [1, 1]), query_length, _ints(op, [1]), axis=0)
        return op.Expand(op.Where(keep, zero_f, low_f), rows)


class Attention(nn.Module):
    """softmax(softcap(Q K^T * scale) + mask) V over the past and new keys (MHA, GQA and MQA).

    Inputs are [batch, heads, seq, head_dim], or [batch, seq, heads * head_dim] when ``heads`` gives
    (query heads, key/value heads); the value head size may differ from the key's. Returns the
    output in the same layout as the query and the present key and value caches (always 4-D).
    """

    def __init__(
        self,
        scale: float,
        softcap: float = 0.0,
        heads: tuple[int, int] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.scale = scale
        self.softcap = softcap
        self.heads = heads

    def forward(self, op, query, key, value, mask, past_key=None, past_value=None):
        attrs = {"scale": float(self.scale)}
        if self.softcap:
            attrs["softcap"] = float(self.softcap)
        if self.heads is not None:
            attrs["q_num_heads"], attrs["kv_num_heads"] = self.heads
        if past_key is None:
            y = op.Attention(query, key, value, mask, **attrs)
            return y, key, value
        y, present_key, present_value = op.Attention(
            query, key, value, mask, past_key, past_value, **attrs, _outputs=3
        )
        return y, present_key, present_value
