"""A decoder written against transformers' ``Cache`` API (``update``, ``get_seq_length``)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import Cache, DynamicCache, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from .configuration_tiny import TinyConfig
from .tiny_layers import GatedMLP, RMSNorm, Rotary, apply_rotary, attend, decoder_mask


class CacheAttention(nn.Module):
    def __init__(self, config: TinyConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.hidden_size // self.heads
        self.style = config.attention
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=True)

    def forward(self, x, cos, sin, mask, cache: Cache | None = None) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        out = attend(q, k, v, mask, self.style)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


class CacheDecoderLayer(nn.Module):
    def __init__(self, config: TinyConfig, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = CacheAttention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size)

    def forward(self, x, cos, sin, mask, cache=None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class CachePreTrainedModel(PreTrainedModel):
    config_class = TinyConfig
    base_model_prefix = "model"


class CacheModel(CachePreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            CacheDecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = Rotary(
            config.hidden_size // config.num_attention_heads, config.rope_theta
        )
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=None, **kwargs) -> BaseModelOutputWithPast:  # fmt: skip
        batch, length = input_ids.shape
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + length, device=input_ids.device)
            position_ids = position_ids[None].expand(batch, -1)
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(position_ids)
        mask = decoder_mask(attention_mask, batch, length, past, x.dtype, x.device)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, past_key_values)
        return BaseModelOutputWithPast(
            last_hidden_state=self.norm(x), past_key_values=past_key_values if use_cache else None
        )


class CacheForCausalLM(CachePreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.model = CacheModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=None, **kwargs) -> CausalLMOutputWithPast:  # fmt: skip
        use_cache = self.config.use_cache if use_cache is None else use_cache
        out = self.model(input_ids, attention_mask, position_ids, past_key_values, use_cache)
        return CausalLMOutputWithPast(
            logits=self.lm_head(out.last_hidden_state), past_key_values=out.past_key_values
        )
