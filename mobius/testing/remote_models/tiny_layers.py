"""Hand-written layers, in the way checkpoints with their own code often write them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Rotary(nn.Module):
    """Angles from ``inv_freq`` and the positions, computed at every call."""

    def __init__(self, dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]


class RotaryTable(nn.Module):
    """Cos and sin tables up to the longest position, indexed by the positions."""

    def __init__(self, dim: int, theta: float, length: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
        freqs = torch.outer(torch.arange(length).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos_cached[positions][:, None], self.sin_cached[positions][:, None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


def decoder_mask(
    attention_mask: torch.Tensor | None,
    batch: int,
    new: int,
    past: int,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """Additive ``[batch, 1, new, past + new]`` mask: causal, and padding where the mask is 0."""
    total = past + new
    query = torch.arange(new, device=device)[:, None] + past
    key = torch.arange(total, device=device)[None, :]
    allowed = (key <= query)[None, None]
    if attention_mask is not None:
        allowed = allowed & attention_mask[:, None, None, :].bool()
    allowed = allowed.expand(batch, 1, new, total)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


def encoder_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive ``[batch, 1, 1, keys]`` mask hiding the padding keys."""
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, style: str
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d) + mask) v`` over ``[batch, heads, tokens, head_dim]``; keys and
    values with fewer heads are repeated."""
    if k.shape[1] != q.shape[1]:
        repeat = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
    if style == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
    scores = scores + mask
    probs = F.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v)


class GatedMLP(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
