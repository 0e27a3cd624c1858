"""Causal LM: input_ids, attention_mask, position_ids -> logits (DESIGN.md, 'Causal LM')."""

from __future__ import annotations

from typing import Any

import torch

from mobius.sources import remote_code
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, TOTAL, Task, TensorSpec, accepted
from mobius.tasks.nested import FromConfig, nested_model_class
from mobius.tasks.positions import model_positions


class CausalLMTask(Task):
    """Decoder-only language models, with a KV cache when every attention layer is captured."""

    name = "text-generation"
    mapping = "MODEL_FOR_CAUSAL_LM"
    attention_implementations = ("mobius", "sdpa", "eager")
    supports_cache = True

    def supports(self, config: ArchitectureConfig) -> bool:
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING,
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        )

        hf = config.hf_config
        if remote_code.class_names(hf, self.mapping):
            return True
        return type(hf) in MODEL_FOR_CAUSAL_LM_MAPPING or bool(
            nested_model_class(hf, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_CAUSAL_LM_MAPPING)
        )

    def auto_class(self, config: ArchitectureConfig) -> Any:
        from transformers import AutoModelForCausalLM
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING,
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        )

        own = remote_code.model_class(config.hf_config, self.mapping)
        if own is not None:  # the checkpoint's own code (``--trust-remote-code``)
            return FromConfig(own)
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
        """Logits for ``inputs``; ``position_ids`` count real tokens from 0 (``positions.py``)."""
        out = model(
            **accepted(model, **model_positions(model, inputs), use_cache=False, return_dict=True)
        )
        return (returned_logits(out),)

    def call_with_cache(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        cache: Any,
        mask_spans_past: bool = True,
    ) -> tuple[torch.Tensor, Any]:
        """Run on top of ``cache`` (a transformers Cache holding the past): logits and the cache.

        Models whose cache holds no tokens (only recurrent states) take the new tokens' mask only.
        ``position_ids`` count real tokens from 0, past ones included (``positions.py``).
        """
        inputs = model_positions(model, inputs)
        if not mask_spans_past:
            new = inputs["input_ids"].shape[1]
            inputs = {**inputs, "attention_mask": inputs["attention_mask"][:, -new:]}
        kwarg = cache_argument(model)
        out = model(**accepted(model, **inputs, **{kwarg: cache}, use_cache=True, return_dict=True))
        return returned_logits(out), returned_cache(out) or cache

    def cached_inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        """The inputs when the trace carries the cache: the mask spans past and new tokens."""
        return [
            TensorSpec("attention_mask", s.dtype, (BATCH, TOTAL))
            if s.name == "attention_mask"
            else s
            for s in self.inputs(config, model)
        ]


def cache_input_name(layer: int, kind: str) -> str:
    """The contract's name for the cache fed in: ``past_key_values.{layer}.{kind}``."""
    return f"past_key_values.{layer}.{kind}"


def cache_output_name(layer: int, kind: str) -> str:
    """The contract's name for the cache returned: ``present.{layer}.{kind}``."""
    return f"present.{layer}.{kind}"


# the names models take and return their cache (or state, RWKV) by
CACHE_ARGUMENTS = ("cache", "past_key_values", "cache_params", "state")


def cache_argument(model: torch.nn.Module) -> str:
    """The name ``model.forward`` takes its cache by (``past_key_values``; recurrent models: ``cache``, ``state``)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return next((n for n in CACHE_ARGUMENTS if n in params), "past_key_values")


def returned_logits(out: Any) -> torch.Tensor:
    """The logits of a model output; a forward that returns a plain tuple has them first, and
    one that returns a tensor (a plain module) returns them alone."""
    if isinstance(out, torch.Tensor):
        return out
    return out[0] if isinstance(out, tuple) else out.logits


def returned_cache(out: Any) -> Any:
    """The cache a model output carries, under either of the names transformers uses; a plain
    tuple ``(logits, cache, ...)`` (code that returns no ModelOutput) has it second."""
    if isinstance(out, tuple):
        return out[1] if len(out) > 1 else None
    for name in CACHE_ARGUMENTS:
        found = getattr(out, name, None)
        if found is not None:
            return found
    return None
