"""A decoder self-attention layer: projections (separate or fused, with or without bias),
optional per-head QK-norm, rotary embedding and cached Attention, in the packed layout.

This is the declarative counterpart of what the pattern matcher emits from a traced model: with
it, a hand-written model gets HF-named weights (``q_proj``/``k_proj``/``v_proj`` or ``qkv_proj``,
``q_norm``/``k_norm``, ``o_proj``) and the same ONNX ops.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.attention import Attention
from mobius.components.linear import Linear
from mobius.components.norms import RMSNorm
from mobius.components.rotary import ApplyRotary

INT64 = ir.DataType.INT64


class SelfAttention(nn.Module):
    """``o_proj(Attention(rope(norm(q)), rope(norm(k)), v, mask, past))`` on ``[batch, seq, hidden]``.

    ``cos``/``sin`` are ``[batch, seq, rotary_dim/2]`` tables (``RotaryTable``) or None for no rope;
    ``mask`` is the additive ``[batch, 1, seq, total]`` mask (``CausalMask``). Returns the output
    and the present key and value caches ``[batch, kv_heads, total, head_dim]``.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        qkv_bias: bool = False,
        o_bias: bool = False,
        fused_qkv: bool = False,
        qk_norm_eps: float | None = None,
        rotary_dim: int | None = None,
        interleaved: bool = False,
        scale: float | None = None,
        softcap: float = 0.0,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.heads, self.kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
        self.fused = fused_qkv
        if fused_qkv:
            self.qkv_proj = Linear(hidden_size, q_size + 2 * kv_size, bias=qkv_bias)
        else:
            self.q_proj = Linear(hidden_size, q_size, bias=qkv_bias)
            self.k_proj = Linear(hidden_size, kv_size, bias=qkv_bias)
            self.v_proj = Linear(hidden_size, kv_size, bias=qkv_bias)
        self.o_proj = Linear(q_size, hidden_size, bias=o_bias)
        self.qk_norm = qk_norm_eps is not None
        if self.qk_norm:
            self.q_norm = RMSNorm(head_dim, qk_norm_eps)
            self.k_norm = RMSNorm(head_dim, qk_norm_eps)
        self.q_rotary = ApplyRotary(rotary_dim, interleaved, num_heads)
        self.k_rotary = ApplyRotary(rotary_dim, interleaved, num_kv_heads)
        self.attention = Attention(
            scale if scale is not None else head_dim**-0.5, softcap, (num_heads, num_kv_heads)
        )

    def _per_head_norm(self, op, x, norm: RMSNorm, heads: int):
        split = op.Concat(
            op.Shape(x, start=0, end=2),
            op.Constant(value=ir.tensor([heads, self.head_dim], dtype=INT64)),
            axis=0,
        )
        normed = norm(op, op.Reshape(x, split))
        return op.Reshape(normed, op.Shape(x))

    def forward(self, op, hidden, cos, sin, mask, past_key=None, past_value=None):
        if self.fused:
            q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
            sizes = op.Constant(value=ir.tensor([q_size, kv_size, kv_size], dtype=INT64))
            q, k, v = op.Split(self.qkv_proj(op, hidden), sizes, axis=-1, _outputs=3)
        else:
            q, k, v = self.q_proj(op, hidden), self.k_proj(op, hidden), self.v_proj(op, hidden)
        if self.qk_norm:
            q = self._per_head_norm(op, q, self.q_norm, self.heads)
            k = self._per_head_norm(op, k, self.k_norm, self.kv_heads)
        if cos is not None:
            q, k = self.q_rotary(op, q, cos, sin), self.k_rotary(op, k, cos, sin)
        y, present_key, present_value = self.attention(op, q, k, v, mask, past_key, past_value)
        return self.o_proj(op, y), present_key, present_value
