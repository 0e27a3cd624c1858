"""A fork that subclasses transformers' Llama and scales its logits."""

from __future__ import annotations

from transformers import LlamaForCausalLM, LlamaModel

from .configuration_llama_fork import LlamaForkConfig


class LlamaForkModel(LlamaModel):
    config_class = LlamaForkConfig


class LlamaForkForCausalLM(LlamaForCausalLM):
    config_class = LlamaForkConfig

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * self.config.logit_scale
        return out
