"""Lumina-Next: the patch sizes as one list entry, and proportional attention's scale as a
tensor of the symbolic token count.

``LuminaPatchEmbed`` returns the image size as ``[(height, width)] * batch_size``, a list as
long as the batch, which fixes the batch in a trace; the model reads its first entry only, so
here the list has one. ``LuminaAttnProcessor2_0`` scales self-attention's logits by
``sqrt(log(tokens, base_sequence_length))`` computed by ``math.log`` of the token count (a
Python float: the trace fixes the count) and passes it to SDPA as ``scale``, which must be a
float; here the query is multiplied by that factor as a tensor and SDPA keeps the model's own
scale (the same logits, up to float32 rounding of the product).
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F


def one_image_size(module: torch.nn.Module) -> None:
    def forward(self: Any, x: torch.Tensor, freqs_cis: torch.Tensor) -> tuple:
        freqs_cis = freqs_cis.to(x.device)
        p = self.patch_size
        batch_size, channels, height, width = x.size()
        rows, cols = height // p, width // p
        x = x.view(batch_size, channels, rows, p, cols, p).permute(0, 2, 4, 1, 3, 5)
        x = self.proj(x.flatten(3)).flatten(1, 2)
        mask = torch.ones(x.shape[0], x.shape[1], dtype=torch.int32, device=x.device)
        return x, mask, [(height, width)], freqs_cis[:rows, :cols].flatten(0, 1).unsqueeze(0)

    module.forward = types.MethodType(forward, module)


def _attention(
    self: Any,
    attn: Any,
    hidden_states: torch.Tensor,
    encoder_hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    query_rotary_emb: torch.Tensor | None = None,
    key_rotary_emb: torch.Tensor | None = None,
    base_sequence_length: int | None = None,
) -> torch.Tensor:
    """``LuminaAttnProcessor2_0.__call__`` (3D hidden states) with the proportional scale a
    tensor factor of the query."""
    from diffusers.models.embeddings import apply_rotary_emb

    batch_size, sequence_length, _ = hidden_states.shape
    query = attn.to_q(hidden_states)
    key = attn.to_k(encoder_hidden_states)
    value = attn.to_v(encoder_hidden_states)
    head_dim = query.shape[-1] // attn.heads
    dtype = query.dtype
    kv_heads = key.shape[-1] // head_dim
    if attn.norm_q is not None:
        query = attn.norm_q(query)
    if attn.norm_k is not None:
        key = attn.norm_k(key)
    query = query.view(batch_size, -1, attn.heads, head_dim)
    key = key.view(batch_size, -1, kv_heads, head_dim)
    value = value.view(batch_size, -1, kv_heads, head_dim)
    if query_rotary_emb is not None:
        query = apply_rotary_emb(query, query_rotary_emb, use_real=False)
    if key_rotary_emb is not None:
        key = apply_rotary_emb(key, key_rotary_emb, use_real=False)
    query, key = query.to(dtype), key.to(dtype)
    scale = None if key_rotary_emb is None else attn.scale
    if key_rotary_emb is not None and base_sequence_length is not None:
        tokens = query.new_zeros((), dtype=torch.float64) + sequence_length
        factor = torch.sqrt(torch.log(tokens) / torch.log(tokens.new_tensor(base_sequence_length)))
        query = query * factor.to(dtype)
    n_rep = attn.heads // kv_heads
    if n_rep >= 1:
        key = key.unsqueeze(3).repeat(1, 1, 1, n_rep, 1).flatten(2, 3)
        value = value.unsqueeze(3).repeat(1, 1, 1, n_rep, 1).flatten(2, 3)
    attention_mask = attention_mask.bool().view(batch_size, 1, 1, -1)
    attention_mask = attention_mask.expand(-1, attn.heads, sequence_length, -1)
    hidden_states = F.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
        attn_mask=attention_mask, scale=scale,
    )  # fmt: skip
    return hidden_states.transpose(1, 2).to(dtype)


def proportional_attention_by_tensor(module: torch.nn.Module) -> None:
    from diffusers.models.attention_processor import LuminaAttnProcessor2_0

    # a class with the processor's signature: Attention passes a processor only the keyword
    # arguments its __call__ names
    processor = type("ProportionalAttnProcessor", (), {"__call__": _attention})()
    for attention in module.modules():
        if isinstance(getattr(attention, "processor", None), LuminaAttnProcessor2_0):
            attention.processor = processor
