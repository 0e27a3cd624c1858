"""A decoder that takes and returns its cache as a tuple of ``(key, value)`` per layer."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_tiny import TinyConfig
from .tiny_layers import GatedMLP, RMSNorm, RotaryTable, apply_rotary, attend, decoder_mask


class TupleAttention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.hidden_size // self.heads
        self.style = config.attention
        self.qkv = nn.Linear(
            config.hidden_size, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=True
        )
        self.out = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=True)

    def forward(self, x, cos, sin, mask, layer_past=None):
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).split(
            [
                self.heads * self.head_dim,
                self.kv_heads * self.head_dim,
                self.kv_heads * self.head_dim,
            ],
            dim=-1,
        )
        q = q.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if layer_past is not None:
            k = torch.cat((layer_past[0], k), dim=2)
            v = torch.cat((layer_past[1], v), dim=2)
        out = attend(q, k, v, mask, self.style)
        return self.out(out.transpose(1, 2).reshape(batch, length, -1)), (k, v)


class TupleBlock(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.ln_1 = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = TupleAttention(config)
        self.ln_2 = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size)

    def forward(self, x, cos, sin, mask, layer_past=None):
        attended, present = self.attn(self.ln_1(x), cos, sin, mask, layer_past)
        x = x + attended
        return x + self.mlp(self.ln_2(x)), present


class TuplePreTrainedModel(PreTrainedModel):
    config_class = TinyConfig
    base_model_prefix = "transformer"


class TupleModel(TuplePreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.h = nn.ModuleList(TupleBlock(config) for _ in range(config.num_hidden_layers))
        self.ln_f = RMSNorm(config.hidden_size, config.rms_norm_eps)
        head_dim = config.hidden_size // config.num_attention_heads
        self.rotary = RotaryTable(head_dim, config.rope_theta, config.max_position_embeddings)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=False):  # fmt: skip
        batch, length = input_ids.shape
        past = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + length, device=input_ids.device)
            position_ids = position_ids[None].expand(batch, -1)
        x = self.wte(input_ids)
        cos, sin = self.rotary(position_ids)
        mask = decoder_mask(attention_mask, batch, length, past, x.dtype, x.device)
        presents = ()
        for i, block in enumerate(self.h):
            layer_past = past_key_values[i] if past_key_values is not None else None
            x, present = block(x, cos, sin, mask, layer_past)
            presents = presents + (present,)
        return self.ln_f(x), (presents if use_cache else None)


class TupleForCausalLM(TuplePreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.transformer = TupleModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=True)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=None, return_dict=None, **kwargs):  # fmt: skip
        use_cache = self.config.use_cache if use_cache is None else use_cache
        hidden, presents = self.transformer(
            input_ids, attention_mask, position_ids, past_key_values, use_cache
        )
        logits = self.lm_head(hidden)
        if return_dict is False:
            return (logits, presents) if use_cache else (logits,)
        return CausalLMOutputWithPast(logits=logits, past_key_values=presents)
