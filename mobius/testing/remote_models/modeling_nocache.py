"""A decoder with no cache at all: every call runs the whole sequence."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_tiny import TinyConfig
from .tiny_layers import GatedMLP, RMSNorm, Rotary, apply_rotary, attend, decoder_mask


class SelfAttention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.hidden_size // self.heads
        self.style = config.attention
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos, sin, mask: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = attend(q, k, v, mask, self.style)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


class Block(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = SelfAttention(config)
        self.post_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor, cos, sin, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin, mask)
        return x + self.mlp(self.post_norm(x))


class NoCachePreTrainedModel(PreTrainedModel):
    config_class = TinyConfig
    base_model_prefix = "model"


class NoCacheModel(NoCachePreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = Rotary(config.hidden_size // config.num_attention_heads, config.rope_theta)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None) -> torch.Tensor:
        batch, length = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(length, device=input_ids.device)[None].expand(batch, -1)
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary(position_ids)
        mask = decoder_mask(attention_mask, batch, length, 0, x.dtype, x.device)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)


class NoCacheForCausalLM(NoCachePreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.model = NoCacheModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None) -> CausalLMOutput:
        hidden = self.model(input_ids, attention_mask, position_ids)
        return CausalLMOutput(logits=self.lm_head(hidden))
