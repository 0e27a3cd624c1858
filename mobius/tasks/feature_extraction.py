"""Feature extraction: encoders (text or vision) -> last_hidden_state (DESIGN.md, 'Encoder')."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from mobius.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, Task, TensorSpec


def is_vision(config: ArchitectureConfig) -> bool:
    hf = config.hf_config
    return config.vocab_size is None and getattr(hf, "image_size", None) is not None


class FeatureExtractionTask(Task):
    """Text encoders take token ids; vision encoders take pixel_values at the config's image size."""

    name = "feature-extraction"

    def auto_class(self, config: ArchitectureConfig) -> Any:
        from transformers import AutoModel

        return AutoModel

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        hf = config.hf_config
        if is_vision(config):
            size = hf.image_size if isinstance(hf.image_size, int) else hf.image_size[0]
            channels = getattr(hf, "num_channels", 3)
            return [TensorSpec("pixel_values", None, (BATCH, channels, size, size))]
        specs = [
            TensorSpec("input_ids", torch.int64, (BATCH, SEQUENCE)),
            TensorSpec("attention_mask", torch.int64, (BATCH, SEQUENCE)),
        ]
        takes_types = "token_type_ids" in inspect.signature(model.forward).parameters
        if takes_types and getattr(hf, "type_vocab_size", 0):
            specs.append(TensorSpec("token_type_ids", torch.int64, (BATCH, SEQUENCE)))
        return specs

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return ["last_hidden_state"]

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        out = model(**inputs, return_dict=True)
        return (out.last_hidden_state,)
