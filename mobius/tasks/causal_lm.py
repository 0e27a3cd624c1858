"""Causal LM: input_ids, attention_mask, position_ids -> logits (DESIGN.md, 'Causal LM')."""

from __future__ import annotations

from typing import Any

import torch

from mobius.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, Task, TensorSpec
from mobius.tasks.nested import FromConfig, nested_model_class


class CausalLMTask(Task):
    """Decoder-only language models, with a KV cache when every attention layer is captured."""

    name = "causal-lm"
    attention_implementations = ("mobius", "sdpa", "eager")
    supports_cache = True

    def auto_class(self, config: ArchitectureConfig) -> Any:
        from transformers import AutoModelForCausalLM
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING,
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        )

        if type(config.hf_config) in MODEL_FOR_CAUSAL_LM_MAPPING:
            return AutoModelForCausalLM
        nested = nested_model_class(  # e.g. Emu3ForCausalLM from a saved emu3_text_model config
            config.hf_config, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_CAUSAL_LM_MAPPING
        )
        return FromConfig(nested) if nested is not None else AutoModelForCausalLM

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return [
            TensorSpec("input_ids", torch.int64, (BATCH, SEQUENCE)),
            TensorSpec("attention_mask", torch.int64, (BATCH, SEQUENCE)),
            TensorSpec("position_ids", torch.int64, (BATCH, SEQUENCE)),
        ]

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return ["logits"]

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        out = model(**inputs, use_cache=False, return_dict=True)
        return (out.logits,)


def cache_input_name(layer: int, kind: str) -> str:
    """The contract's name for the cache fed in: ``past_key_values.{layer}.{kind}``."""
    return f"past_key_values.{layer}.{kind}"


def cache_output_name(layer: int, kind: str) -> str:
    """The contract's name for the cache returned: ``present.{layer}.{kind}``."""
    return f"present.{layer}.{kind}"
