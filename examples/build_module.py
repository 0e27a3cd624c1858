"""A language model written in plain PyTorch (no transformers), converted by
``mobius.build_module`` to the causal-LM contract with its KV cache, then decoded greedily with
onnxruntime next to PyTorch.

    python examples/build_module.py [OUT_DIR]

The module is traced as ``mobius build`` traces a checkpoint: the hand-written RMSNorm becomes
ONNX ``RMSNormalization``, the rest is lowered op by op, and the cache the module takes and
returns (one ``(key, value)`` pair per layer) becomes ``past_key_values.{i}.key/value`` in and
``present.{i}.key/value`` out.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import mobius
from mobius.runtime.causal_lm import OnnxCausalLM


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(size)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = x.float()
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * hidden.to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        inv_freq = 1.0 / 10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = positions[:, None, :, None].float() * self.inv_freq
        cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def forward(self, x, positions, mask, past=None):
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, self.head_dim).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = self.rotate(q, positions), self.rotate(k, positions)
        if past is not None:
            k, v = torch.cat((past[0], k), 2), torch.cat((past[1], v), 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(batch, length, -1)), (k, v)


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.attn = RMSNorm(hidden), CausalSelfAttention(hidden, heads)
        self.norm2, self.mlp = (
            RMSNorm(hidden),
            nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden)),
        )

    def forward(self, x, positions, mask, past=None):
        attended, present = self.attn(self.norm1(x), positions, mask, past)
        x = x + attended
        return x + self.mlp(self.norm2(x)), present


class TinyLM(nn.Module):
    """Token ids -> logits; takes and returns its cache as one (key, value) pair per layer."""

    def __init__(self, vocab: int = 256, hidden: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm, self.head = RMSNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        batch, length = input_ids.shape
        past = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        if attention_mask is None:
            attention_mask = torch.ones(batch, past + length, dtype=torch.long)
        if position_ids is None:
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, past:]
        causal = torch.arange(past + length)[None, :] <= torch.arange(length)[:, None] + past
        allowed = causal[None, None] & attention_mask[:, None, None, :].bool()
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
        x, presents = self.embed(input_ids), []
        for i, block in enumerate(self.blocks):
            past_i = past_key_values[i] if past_key_values is not None else None
            x, present = block(x, position_ids, mask, past_i)
            presents.append(present)
        return self.head(self.norm(x)), tuple(presents)


def convert(model: nn.Module, directory: Path) -> Path:
    """``model`` as a causal-LM graph with its KV cache, saved to ``directory``."""
    ids = torch.randint(0, 256, (2, 7))
    positions = torch.arange(7).expand(2, -1)
    example = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": positions}
    package = mobius.build_module(model, example, task="text-generation")
    return package.save(directory, overwrite=True)


def torch_greedy(model: nn.Module, ids: torch.Tensor, new_tokens: int) -> list[int]:
    """Greedy decoding in PyTorch, feeding the module's cache back at every step."""
    tokens, cache, step = [], None, ids
    with torch.no_grad():
        for _ in range(new_tokens):
            logits, cache = model(step, past_key_values=cache)
            step = logits[:, -1:].argmax(-1)
            tokens.append(int(step))
    return tokens


def main(directory: Path) -> None:
    torch.manual_seed(0)
    model = TinyLM().eval()
    convert(model, directory)
    prompt = torch.tensor([[1, 17, 42, 99, 7]])
    onnx_tokens = OnnxCausalLM(directory).generate(prompt.numpy(), np.ones_like(prompt), 12)
    print("onnxruntime:", onnx_tokens[0].tolist())
    print("pytorch:    ", torch_greedy(model, prompt, 12))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "tiny-lm")
