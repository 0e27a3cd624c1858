"""Longformer: sliding-window attention with global tokens as two dense masked attentions.

HF pads the input to a multiple of ``attention_window`` and computes the window with chunked,
strided views whose counts are ``torch.div`` of the length read back with ``.item()``, and it
gathers the global tokens with ``nonzero`` (a data-dependent count): torch.export can size
neither. What HF computes, per query:

- a local query attends to the keys within ``attention_window // 2`` positions that are neither
  padding nor global (HF adds ``finfo.min`` to those), plus every global key, all with the
  ``query``/``key``/``value`` projections; padding queries output zero;
- a global query (``attention_mask`` 2, i.e. ``global_attention_mask``, or the heads' own
  choice: the first token for classification, the question for QA and multiple choice) attends
  to every non-padding key with the ``*_global`` projections, and that output replaces the local
  one.

Both are the same scores over the whole length with a dense mask, so no padding to the window
is needed (padding positions never change the others' outputs), and the global path is always
computed and selected per position (no branch on whether any token is global).
"""

from __future__ import annotations

import math
from types import MethodType
from typing import Any

import torch


def no_window_padding(module: torch.nn.Module) -> None:
    """``LongformerModel``: no padding to the window (the dense attention needs none)."""

    def unpadded(
        self: torch.nn.Module,
        input_ids: Any,
        attention_mask: Any,
        token_type_ids: Any,
        position_ids: Any,
        inputs_embeds: Any,
        pad_token_id: int,
    ) -> tuple[int, Any, Any, Any, Any, Any]:
        return 0, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds

    module._pad_to_window_size = MethodType(unpadded, module)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)


def _attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """Softmax attention of ``[batch, heads, length, dim]`` over keys where ``allowed``."""
    scores = (query @ key.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
    return probs @ value


def dense_window_and_global(module: torch.nn.Module) -> None:
    """``LongformerSelfAttention``: the local window and the global tokens as dense attention."""

    def forward(
        self: torch.nn.Module,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        is_index_masked: torch.Tensor | None = None,
        is_index_global_attn: torch.Tensor | None = None,
        is_global_attn: Any = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor]:
        batch, length, width = hidden_states.shape
        heads, scale = self.num_heads, 1.0 / math.sqrt(self.head_dim)
        positions = torch.arange(length, device=hidden_states.device)
        band = (positions[:, None] - positions[None, :]).abs() <= self.one_sided_attn_window_size
        padding_key = is_index_masked[:, None, None, :]
        global_key = is_index_global_attn[:, None, None, :]
        local_allowed = (band[None, None] & ~padding_key & ~global_key) | global_key
        local = _attend(
            _heads(self.query(hidden_states) * scale, heads),
            _heads(self.key(hidden_states), heads),
            _heads(self.value(hidden_states), heads),
            local_allowed,
        )
        local = local.masked_fill(is_index_masked[:, None, :, None], 0.0)
        global_ = _attend(
            _heads(self.query_global(hidden_states) * scale, heads),
            _heads(self.key_global(hidden_states), heads),
            _heads(self.value_global(hidden_states), heads),
            ~padding_key,
        )
        out = torch.where(is_index_global_attn[:, None, :, None], global_, local)
        return (out.transpose(1, 2).reshape(batch, length, width),)

    module.forward = MethodType(forward, module)
