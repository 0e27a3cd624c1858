"""A fork's config: Llama's, under its own model type, with one field more."""

from __future__ import annotations

from transformers import LlamaConfig


class LlamaForkConfig(LlamaConfig):
    model_type = "llama_fork"
    logit_scale: float = 1.0
