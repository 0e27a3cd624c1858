"""Build the HF model on the meta device and trace it with torch.export."""

from __future__ import annotations

import contextlib
import copy
import io
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from mobius.config import ArchitectureConfig
from mobius.errors import UnsupportedError
from mobius.synth.shims import make_traceable
from mobius.tasks import Task, TensorSpec
from mobius.weights import KeyMapping
from patterns.base import WRAPPER_PREFIX, MatchContext


@dataclass
class TracedModel:
    """The exported program plus what the meta model cannot give back: buffer values and names."""

    program: torch.export.ExportedProgram
    inputs: list[TensorSpec]
    outputs: list[str]
    buffer_values: dict[str, torch.Tensor]  # state-dict name -> real value computed at init
    tied_names: dict[str, list[str]]  # parameter name -> every name sharing that tensor
    constant_values: dict[str, torch.Tensor]  # lifted constants (tensors built inside forward)
    key_to_param: KeyMapping
    dtype: torch.dtype
    hf_config: Any = None
    causal: bool = False  # traced for a causal-LM task
    module_classes: dict[str, str] = field(default_factory=dict)

    @property
    def match_context(self) -> MatchContext:
        return MatchContext(self.hf_config, self.causal)


class _TaskWrapper(torch.nn.Module):
    """Calls the HF model the way the task says, with inputs in the contract's order."""

    def __init__(self, model: torch.nn.Module, task: Task, names: list[str]) -> None:
        super().__init__()
        self.m = model
        self._task = task
        self._names = names

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._task.call(self.m, dict(zip(self._names, args, strict=True)))


# transformers' default MoE path traces to ops nothing lowers (grouped_mm_fallback, histc);
# batched_mm traces to plain gathers and batched matmuls.
EXPERTS_IMPLEMENTATION = "batched_mm"


def instantiate_on_meta(
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    implementations: tuple[str, ...] | None = None,
) -> torch.nn.Module:
    """Parameters on meta (no memory); buffers computed for real on CPU so we keep their values."""
    from accelerate import init_empty_weights

    hf = copy.deepcopy(config.hf_config)  # transformers writes into the config while building
    auto = task.auto_class(config)
    last_error: Exception | None = None
    implementations = implementations or task.attention_implementations
    if "mobius" in implementations:
        from patterns.attention import install

        install()
    for attn in implementations:
        try:
            with init_empty_weights(include_buffers=False), _quiet():
                model = auto.from_config(
                    hf,
                    dtype=dtype,
                    attn_implementation=attn,
                    experts_implementation=EXPERTS_IMPLEMENTATION,
                )
            return make_traceable(model.eval())
        except (ValueError, KeyError) as exc:  # the model does not support this implementation
            last_error = exc
    raise UnsupportedError(f"transformers could not build {config.model_type}: {last_error}")


@contextlib.contextmanager
def _quiet():
    """transformers' warnings and prints off; FX stack traces off (mobius never reads
    ``node.meta["stack_trace"]``, and capturing one per node costs a few % of a trace)."""
    import torch.fx.config as fx_config

    logger = logging.getLogger("transformers")
    level, stack_traces = logger.level, fx_config.do_not_emit_stack_traces
    logger.setLevel(logging.ERROR)
    fx_config.do_not_emit_stack_traces = True
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)
        fx_config.do_not_emit_stack_traces = stack_traces


def checkpoint_key_mapper(model: torch.nn.Module) -> KeyMapping:
    """transformers' own load-time renaming and fusing of checkpoint tensors into parameters."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    transforms = get_model_conversion_mapping(model)
    return KeyMapping(
        model=model,
        renamings=[t for t in transforms if isinstance(t, WeightRenaming)],
        converters=[t for t in transforms if isinstance(t, WeightConverter)],
        meta_state=model.state_dict(),
    )


def _tied_groups(model: torch.nn.Module) -> dict[str, list[str]]:
    by_id: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(param), []).append(name)
    return {name: names for names in by_id.values() for name in names}


def _export(
    wrapper: torch.nn.Module,
    specs: list[TensorSpec],
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    device: str,
) -> torch.export.ExportedProgram:
    args = tuple(
        torch.zeros_like(task.example_value(s, config, dtype), device=device) for s in specs
    )
    dynamic = tuple(
        {axis: torch.export.Dim.DYNAMIC for axis, d in enumerate(s.dims) if isinstance(d, str)}
        for s in specs
    )
    try:
        with _quiet():
            return torch.export.export(wrapper, args, dynamic_shapes=(dynamic,), strict=False)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedError(
            f"torch.export could not trace {config.model_type} ({type(exc).__name__}: {first[:300]})"
        ) from exc


def _meta_constants(
    program: torch.export.ExportedProgram, buffer_values: dict[str, torch.Tensor]
) -> list[str]:
    """Tensors created inside forward() (lifted constants) that have no value because we traced on meta."""
    return [
        name
        for name, value in program.constants.items()
        if isinstance(value, torch.Tensor)
        and value.device.type == "meta"
        and name.removeprefix(WRAPPER_PREFIX) not in buffer_values
    ]


def _recompute_constants(
    specs: list[TensorSpec],
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    implementations: tuple[str, ...] | None,
) -> dict[str, torch.Tensor]:
    """Trace a fresh instance on CPU with uninitialised storage to get in-forward constants' values.

    ``to_empty`` reserves address space without touching it, so resident memory stays small; the
    parameters' contents are never read, only the constants that forward() builds from literals.
    """
    model = instantiate_on_meta(config, task, dtype, implementations).to_empty(device="cpu")
    program = _export(
        _TaskWrapper(model, task, [s.name for s in specs]), specs, config, task, dtype, device="cpu"
    )
    return {
        k: v
        for k, v in program.constants.items()
        if isinstance(v, torch.Tensor) and v.device.type == "cpu"
    }


def trace(
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype = torch.float32,
    implementations: tuple[str, ...] | None = None,
) -> TracedModel:
    """Instantiate on meta and export with dynamic batch and sequence dimensions."""
    model = instantiate_on_meta(config, task, dtype, implementations)
    model.tie_weights()
    key_to_param = checkpoint_key_mapper(model)
    buffer_values = {
        name: b.detach().clone() for name, b in model.named_buffers() if b.device.type != "meta"
    }
    tied = _tied_groups(model)
    classes = {
        name: f"{type(mod).__module__}.{type(mod).__qualname__}"
        for name, mod in model.named_modules()
    }
    model = model.to("meta")
    specs = task.inputs(config, model)
    wrapper = _TaskWrapper(model, task, [s.name for s in specs])
    program = _export(wrapper, specs, config, task, dtype, device="meta")
    constants = {
        k: v
        for k, v in program.constants.items()
        if isinstance(v, torch.Tensor) and v.device.type != "meta"
    }
    if _meta_constants(program, buffer_values):
        constants.update(_recompute_constants(specs, config, task, dtype, implementations))
    return TracedModel(
        program=program,
        inputs=specs,
        outputs=task.outputs(config),
        buffer_values=buffer_values,
        tied_names=tied,
        key_to_param=key_to_param,
        constant_values={k.removeprefix(WRAPPER_PREFIX): v for k, v in constants.items()},
        dtype=dtype,
        hf_config=config.hf_config,
        causal=task.supports_cache,
        module_classes=classes,
    )
