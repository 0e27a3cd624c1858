"""Causal LM: input_ids, attention_mask, position_ids -> logits (DESIGN.md, 'Causal LM')."""

from __future__ import annotations

from typing import Any

import torch

from mobius.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, Task, TensorSpec


class CausalLMTask(Task):
    """Decoder-only language models. This graph has no KV cache yet: the full sequence each call."""

    name = "causal-lm"

    def auto_class(self, config: ArchitectureConfig) -> Any:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return [
            TensorSpec("input_ids", torch.int64, (BATCH, SEQUENCE)),
            TensorSpec("attention_mask", torch.int64, (BATCH, SEQUENCE)),
            TensorSpec("position_ids", torch.int64, (BATCH, SEQUENCE)),
        ]

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return ["logits"]

    def call(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        out = model(**inputs, use_cache=False, return_dict=True)
        return (out.logits,)
