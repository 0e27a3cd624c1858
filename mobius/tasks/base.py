"""What a task is: the I/O contract of one graph and how to trace the HF model for it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from mobius.sources.config import ArchitectureConfig

BATCH = "batch"
SEQUENCE = "sequence_length"
PAST = "past_sequence_length"  # tokens already in the cache
TOTAL = "total_sequence_length"  # past plus new tokens (the attention mask's width with a cache)


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: name, dtype and per-axis dimension names (or sizes)."""

    name: str
    dtype: torch.dtype | None  # None: the model's dtype
    dims: tuple[str | int, ...]
    # the sizes its dynamic axes take are multiples of this (patches merged in blocks): the trace
    # may assume so, and trace_bounds checks sizes that are
    multiple_of: int = 1


class Task:
    """An I/O contract. Subclasses say which HF class to build and how to call it."""

    name: str = ""
    # transformers attention implementations to try, in order ("mobius" captures attention; a
    # trace where some attention escapes the capture is redone with the others)
    attention_implementations: tuple[str, ...] = ("mobius", "sdpa", "eager")
    supports_cache: bool = False
    # a task of several graphs whose graphs capture attention as fused calls (encoder-decoders)
    captures_attention: bool = False
    # what else converts the checkpoint when this task's graphs cannot be traced (said in the error)
    alternative: str | None = None
    mapping: str = ""  # transformers' MODEL_FOR_..._MAPPING (without the suffix) giving the class
    classifies: bool = False  # the outputs are scores over the config's id2label

    def supports(self, config: ArchitectureConfig) -> bool:
        """Whether transformers has a model class for ``config`` that this task can build."""
        raise NotImplementedError

    # the input whose zeros mark padding keys for the captured attention (None: nothing is padded,
    # as for pixel_values); without a cache, attention may be bidirectional (``is_causal=False``)
    padding_mask_input: str | None = "attention_mask"

    def auto_class(self, config: ArchitectureConfig) -> Any:
        raise NotImplementedError

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        raise NotImplementedError

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        raise NotImplementedError

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        """Run the HF model on the contract's inputs and return the contract's outputs in order."""
        raise NotImplementedError

    def example_value(
        self, spec: TensorSpec, config: ArchitectureConfig, dtype: torch.dtype
    ) -> torch.Tensor:
        """A meta tensor to trace with; named dims get distinct sizes so no two are unified."""
        sizes = {BATCH: 2, SEQUENCE: 7, PAST: 4, TOTAL: 11}
        shape = [d if isinstance(d, int) else sizes.get(d, 5) for d in spec.dims]
        return torch.zeros(shape, dtype=spec.dtype or dtype, device="meta")


def accepted(model: torch.nn.Module, **kwargs: Any) -> dict[str, Any]:
    """The keyword arguments ``model.forward`` takes: all of them where it takes ``**kwargs``
    (transformers' models), else those it names (a checkpoint's own code may name only a few)."""
    params = inspect.signature(model.forward).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}
