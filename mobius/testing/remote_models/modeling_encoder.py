"""A bidirectional encoder with LayerNorm and learned positions: feature extraction and a
sequence classification head."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, SequenceClassifierOutput

from .configuration_tiny import TinyConfig
from .tiny_layers import attend, encoder_mask


class EncoderAttention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.heads
        self.style = config.attention
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

        out = attend(
            heads(self.query(x)), heads(self.key(x)), heads(self.value(x)), mask, self.style
        )
        return self.dense(out.transpose(1, 2).reshape(batch, length, -1))


class EncoderLayer(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.attention = EncoderAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=1e-5)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=1e-5)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x, mask))
        return self.output_norm(x + self.output(nn.functional.gelu(self.intermediate(x))))


class EncoderPreTrainedModel(PreTrainedModel):
    config_class = TinyConfig
    base_model_prefix = "encoder"


class TinyEncoderModel(EncoderPreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.embedding_norm = nn.LayerNorm(config.hidden_size, eps=1e-5)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))
        self.post_init()

    def forward(
        self, input_ids, attention_mask=None, return_dict=None, **kwargs
    ) -> BaseModelOutput:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        x = self.embedding_norm(x)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = encoder_mask(attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(x, mask)
        return BaseModelOutput(last_hidden_state=x)


class TinyEncoderForSequenceClassification(EncoderPreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.encoder = TinyEncoderModel(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, **kwargs) -> SequenceClassifierOutput:
        hidden = self.encoder(input_ids, attention_mask).last_hidden_state
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        return SequenceClassifierOutput(logits=self.classifier(pooled))
