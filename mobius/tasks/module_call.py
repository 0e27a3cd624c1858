"""A plain ``nn.Module``'s own I/O (``build_module`` without a task): the example inputs in, by
name; whatever its forward returns out, flattened and named.

An output that is a tensor is ``output``; a tuple or list gives ``output.{i}``; a dict or a
ModelOutput gives its keys (nested ones ``key.{i}``). Each input's axes are fixed at the example's
size except those named in ``dynamic_axes`` (by default axis 0 of every input with two axes or
more, ``batch``); the trace gives each named axis its own size, so that no two are taken for
equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from mobius.errors import ConfigError
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, Task, TensorSpec

MODULE_TASK = "module"
# sizes the trace gives named axes, in turn (a size the example has is kept where it is free)
_SIZES = (2, 7, 5, 11, 13, 17, 19, 23, 29, 31)


def flatten_outputs(value: Any, prefix: str = "output") -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor in a forward's return value, in order; None is skipped."""
    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, Mapping):  # dicts and ModelOutputs (whose None fields are absent)
        items = [(str(k), v) for k, v in value.items()]
        return [pair for k, v in items for pair in flatten_outputs(v, k)]
    if isinstance(value, (tuple, list)):
        return [pair for i, v in enumerate(value) for pair in flatten_outputs(v, f"{prefix}.{i}")]
    if value is None:
        return []
    raise ConfigError(
        f"the module returns a {type(value).__name__} at '{prefix}'; build_module needs tensors "
        "(alone, in tuples, lists or dicts)"
    )


class ModuleCall(Task):
    """The module called on its example inputs by name (``build_module`` without a task)."""

    name = MODULE_TASK
    attention_implementations = ("eager",)  # nothing to capture: no transformers attention
    supports_cache = False

    def __init__(
        self,
        examples: dict[str, torch.Tensor],
        outputs: list[str],
        dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
    ) -> None:
        unknown = sorted(set(dynamic_axes or {}) - set(examples))
        if unknown:
            raise ConfigError(
                f"dynamic_axes names {', '.join(unknown)}, which no example input is called; "
                f"the inputs: {', '.join(examples)}"
            )
        self._shapes = {name: tuple(t.shape) for name, t in examples.items()}
        self._specs = [_spec(name, t, dynamic_axes) for name, t in examples.items()]
        self._sizes = _sizes(self._specs, self._shapes)
        self._outputs = outputs
        self.padding_mask_input = "attention_mask" if "attention_mask" in examples else None

    def supports(self, config: ArchitectureConfig) -> bool:
        return True

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return list(self._specs)

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return list(self._outputs)

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        return tuple(t for _, t in flatten_outputs(model(**inputs)))

    def example_value(
        self, spec: TensorSpec, config: ArchitectureConfig, dtype: torch.dtype
    ) -> torch.Tensor:
        shape = [self._sizes[d] if isinstance(d, str) else d for d in spec.dims]
        return torch.zeros(shape, dtype=spec.dtype or dtype, device="meta")


def _spec(
    name: str, tensor: torch.Tensor, dynamic_axes: Mapping[str, Mapping[int, str]] | None
) -> TensorSpec:
    """The input ``name``: floating inputs take the build's dtype; its named axes vary."""
    named = (dynamic_axes or {}).get(name, {0: BATCH} if tensor.dim() > 1 else {})
    for axis in named:
        if not -tensor.dim() <= axis < tensor.dim():
            raise ConfigError(
                f"dynamic_axes names axis {axis} of '{name}', which has {tensor.dim()} axes"
            )
    named = {axis % tensor.dim(): str(label) for axis, label in named.items()}
    dims = tuple(named.get(axis, size) for axis, size in enumerate(tensor.shape))
    return TensorSpec(name, None if tensor.is_floating_point() else tensor.dtype, dims)


def _sizes(specs: list[TensorSpec], shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """A distinct size for each named axis: the example's where it is above 1 and no other
    named axis has it, else the next free one of ``_SIZES``."""
    sizes: dict[str, int] = {}
    for spec in specs:
        for axis, dim in enumerate(spec.dims):
            if isinstance(dim, str) and dim not in sizes:
                example = shapes[spec.name][axis]
                taken = set(sizes.values())
                free = example if example > 1 and example not in taken else None
                sizes[dim] = free or next(s for s in _SIZES if s not in taken)
    return sizes
