"""LED: the Longformer encoder's sliding-window attention as one banded attention.

HF pads the encoder input to a multiple of ``attention_window`` and computes the window with
chunked, strided views whose counts are ``torch.div`` of the length (tensors read back with
``.item()``): torch.export cannot size them. Each query attends to the keys within
``attention_window // 2`` positions; padding keys get ``finfo.min`` added, positions beyond the
sequence are excluded, and padding queries output zero. The same scores over the whole length with
a band mask give the same attention with no padding to the window, so the encoder's own padding
is skipped too (padding positions never change the others' outputs).

Global attention comes from ``global_attention_mask``, which no graph input fills: with
``attention_mask`` alone no token is global (the mask HF derives has no positive entry), so only
the local path is kept.
"""

from __future__ import annotations

import math
from types import MethodType
from typing import Any

import torch


def no_window_padding(module: torch.nn.Module) -> None:
    """``LEDEncoder``: no padding to the window (the banded attention needs none)."""

    def unpadded(
        self: torch.nn.Module,
        input_ids: Any,
        attention_mask: Any,
        inputs_embeds: Any,
        pad_token_id: int,
    ) -> tuple[int, Any, Any, Any]:
        return 0, input_ids, attention_mask, inputs_embeds

    module._pad_to_window_size = MethodType(unpadded, module)


def banded_attention(module: torch.nn.Module) -> None:
    """``LEDEncoderSelfAttention``: local attention within the window, as dense masked scores."""

    def forward(
        self: torch.nn.Module,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        is_index_masked: torch.Tensor | None = None,
        is_index_global_attn: torch.Tensor | None = None,
        is_global_attn: Any = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor]:
        batch, length, _ = hidden_states.shape
        heads, head_dim = self.num_heads, self.head_dim

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(batch, length, heads, head_dim).transpose(1, 2)

        query = split(self.query(hidden_states) / math.sqrt(head_dim))
        key, value = split(self.key(hidden_states)), split(self.value(hidden_states))
        scores = query @ key.transpose(-1, -2)  # [batch, heads, length, length]
        # padding keys: HF adds the mask's finfo.min to their scores
        padding = (attention_mask != 0).to(scores.dtype) * torch.finfo(scores.dtype).min
        scores = scores + padding[:, None, None, :]
        positions = torch.arange(length, device=scores.device)
        outside = (positions[:, None] - positions[None, :]).abs() > self.one_sided_attn_window_size
        scores = scores.masked_fill(outside, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        probs = probs.masked_fill(is_index_masked[:, None, :, None], 0.0).type_as(scores)
        out = (probs @ value).transpose(1, 2).reshape(batch, length, heads * head_dim)
        return (out,)

    module.forward = MethodType(forward, module)
