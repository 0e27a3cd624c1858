"""Build the HF model on the meta device and trace it with torch.export."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from mobius import failures
from mobius.errors import ConfigError, UnsupportedError
from mobius.output.weight_binder import WeightBinder
from mobius.output.weights import Checkpoint
from mobius.sources.config import ArchitectureConfig
from mobius.sources.key_mapping import KeyMapping
from mobius.synth import replicate
from mobius.synth.decompose import decompose_unlowered
from mobius.synth.init_values import computed_parameters
from mobius.synth.inline import inline_grad_regions
from mobius.synth.lifted_constants import match_constants
from mobius.synth.meta_model import instantiate_on_meta, quiet
from mobius.synth.shims import (
    ScalarFillsOnMeta,
    tracing_branches,
    unchecked_distributions,
)
from mobius.synth.state import CacheLayout
from mobius.synth.state_adapters import probe_layout
from mobius.synth.trace_bounds import (
    GuardSites,
    LengthBound,
    guard_lengths,
    length_bounds,
    length_limit,
    model_site,
    one_row_per_new_token,
    specialised_dims,
    user_inputs,
    where_guarded,
)
from mobius.tasks import Task, TensorSpec
from mobius.tasks.base import SEQUENCE
from patterns.attention import single_graph_task
from patterns.base import WRAPPER_PREFIX, MatchContext

log = logging.getLogger("mobius")


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
    padding_input: str | None = "attention_mask"  # the task input holding the padding mask
    # attention modules whose call the mobius implementation declined: path -> reason
    attention_declines: dict[str, str] = field(default_factory=dict)
    module_classes: dict[str, str] = field(default_factory=dict)
    cache_in_graph: bool = False  # past/present states are traced inputs/outputs (state.py)
    state_kinds: set[str] | None = None  # cache-layer attributes the model fills (None: unknown)
    kv_layers: int = 0  # layers whose cache holds keys and values
    # traced for one new token: the contract's inputs, which token_loop.py loops the step over
    loop_inputs: list[TensorSpec] = field(default_factory=list)
    # lengths the graph holds for only up to a bound (checked at run time: trace_bounds.py)
    length_bounds: list[LengthBound] = field(default_factory=list)

    def binder(self, checkpoint: Checkpoint | None) -> WeightBinder:
        """Binds this trace's parameters, buffers and constants to ``checkpoint`` (None: graph
        inputs instead of weights)."""
        return WeightBinder(
            checkpoint,
            buffer_values=self.buffer_values,
            tied_names=self.tied_names,
            key_to_param=self.key_to_param,
            constants=self.constant_values,
        )

    @property
    def match_context(self) -> MatchContext:
        names = [s.name for s in self.inputs]
        placeholders = [n.name for n in user_inputs(self.program)]
        padding = dict(zip(names, placeholders, strict=False)).get("attention_mask")
        return MatchContext(self.hf_config, self.causal, padding)


class SpecialisedShapeError(UnsupportedError):
    """The trace fixed a dimension that should vary (a Python loop over tokens, for instance)."""


class _TaskWrapper(torch.nn.Module):
    """Calls the HF model the way the task says, with inputs in the contract's order.

    With a cache ``layout``, the contract's inputs are followed by the past states, and the
    outputs by the states after the call.
    """

    def __init__(
        self, model: torch.nn.Module, task: Task, names: list[str], layout: CacheLayout | None
    ) -> None:
        super().__init__()
        self.m = model
        self._task = task
        self._names = names
        self._layout = layout
        self.length_guards: list[LengthBound] = []  # checked in the graph (guard_lengths)

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        inputs = dict(zip(self._names, args[: len(self._names)], strict=True))
        if self._layout is None:
            padding = inputs.get(self._task.padding_mask_input or "")
            lengths = (
                None
                if padding is None
                else tuple(a.shape[-1] for a in inputs.values() if a.dim() >= 2)
            )
            with single_graph_task(not self._task.supports_cache, lengths):
                outputs = self._task.call(self.m, inputs)
            return guard_lengths(inputs, tuple(outputs), self.length_guards)
        cache = self._layout.fill(self.m, args[len(self._names) :])
        grows = any(slot.grows for slot in self._layout.slots)
        logits, cache = self._task.call_with_cache(self.m, inputs, cache, mask_spans_past=grows)
        return (logits, *self._layout.read(self.m, cache))


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
    one_token: bool = False,
) -> torch.export.ExportedProgram:
    args = tuple(
        torch.zeros_like(task.example_value(s, config, dtype), device=device) for s in specs
    )
    # AUTO lets export record how the model relates the dimensions (a mask as long as the ids);
    # a dimension it fixes to a constant instead is caught below
    dynamic = tuple(
        {axis: torch.export.Dim.AUTO for axis, d in enumerate(s.dims) if isinstance(d, str)}
        for s in specs
    )
    try:
        with (
            quiet(),
            tracing_branches(wrapper, one_token),
            unchecked_distributions(),
            ScalarFillsOnMeta(),
            GuardSites() as sites,
        ):
            program = torch.export.export(wrapper, args, dynamic_shapes=(dynamic,), strict=False)
    except Exception as exc:
        failures.check(exc)  # interrupts, out of memory and our own bugs are no trace failure
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedError(
            f"torch.export could not trace {config.model_type} ({type(exc).__name__}: "
            f"{first[:300]}){model_site(exc)}"
        ) from exc
    fixed = specialised_dims(program, specs)
    if fixed:
        raise SpecialisedShapeError(
            f"torch.export fixed dynamic dimensions of {config.model_type} to constants: "
            + ", ".join(fixed)
            + where_guarded(sites, specs, fixed)
        )
    guarded = getattr(wrapper, "length_guards", None)
    bounds = [
        b for b in length_bounds(program, specs, length_limit(config)) if b not in (guarded or [])
    ]
    if bounds:
        # a branch on the length (chunked vs recurrent kernels, padding to a chunk): the graph
        # would silently compute the traced branch for every other length. A single-graph task
        # (no cache to grow) keeps a graph bounded from above, with the bound checked at run time
        if guarded == [] and _bound_in_graph(task, bounds):
            wrapper.length_guards = bounds
            return _export(wrapper, specs, config, task, dtype, device, one_token)
        shown = [str(b) for b in bounds]
        raise SpecialisedShapeError(
            f"the trace of {config.model_type} holds only for "
            + ", ".join(shown)
            + where_guarded(sites, specs, shown)
        )
    return inline_grad_regions(program)  # grad modes mean nothing here


def _bound_in_graph(task: Task, bounds: list[LengthBound]) -> bool:
    """A task without a cache (one call on whole inputs) keeps lower and upper bounds, checked
    in the graph; an equality that fails at lengths on both sides of the traced one (a loop over
    chunks) has no such check."""
    return not task.supports_cache and all(b.ruled_out is None for b in bounds)


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
    meta_program: torch.export.ExportedProgram,
    specs: list[TensorSpec],
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    implementations: tuple[str, ...] | None,
    layout: CacheLayout | None,
    one_token: bool = False,
) -> dict[str, torch.Tensor]:
    """Trace a fresh instance on CPU with uninitialised storage to get in-forward constants' values
    (by the meta trace's names: ``lifted_constants.match_constants``).

    ``to_empty`` reserves address space without touching it, so resident memory stays small; the
    parameters' contents are never read, only the constants that forward() builds from literals.
    """
    model = instantiate_on_meta(config, task, dtype, implementations).to_empty(device="cpu")
    wrapper = _TaskWrapper(model, task, _contract_names(specs, layout), layout)
    program = _export(wrapper, specs, config, task, dtype, "cpu", one_token)
    return match_constants(meta_program, program)


def trace(
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype = torch.float32,
    implementations: tuple[str, ...] | None = None,
    *,
    carry_cache: bool = False,
    one_token: bool = False,
) -> TracedModel:
    """Instantiate on meta and export with dynamic batch and sequence dimensions.

    With ``carry_cache`` the model runs on top of a transformers Cache filled from extra graph
    inputs (``mobius.synth.state``), and returns the cache's tensors after the call. With
    ``one_token`` as well, the sequence axis is traced as 1 (for models that loop over tokens in
    Python); ``synth/token_loop.py`` runs that graph once per token.
    """
    model = instantiate_on_meta(config, task, dtype, implementations)
    if hasattr(model, "tie_weights"):  # a transformers model (``build_module`` takes any module)
        model.tie_weights()
    key_to_param = checkpoint_key_mapper(model)
    buffer_values = {
        name: b.detach().clone() for name, b in model.named_buffers() if b.device.type != "meta"
    }
    buffer_values.update(computed_parameters(model))  # Marian's unsaved sinusoidal tables
    tied = _tied_groups(model)
    classes = {
        name: f"{type(mod).__module__}.{type(mod).__qualname__}"
        for name, mod in model.named_modules()
    }
    model = model.to("meta")
    loop_inputs: list[TensorSpec] = []
    layout = probe_layout(model) if carry_cache else None
    plan = replicate.layer_plan(model, config.hf_config) if layout is None else None
    replicating = plan is not None and replicate.enabled()
    # a replicated trace probes its cut model instead (``_cut_cache``): the full model's meta
    # call costs ~10 ms a layer
    probed = layout or (_try_probe(model) if task.supports_cache and not replicating else None)
    if layout is None:
        specs = task.inputs(config, model)
        outputs = task.outputs(config)
    else:
        specs = task.cached_inputs(config, model) + [slot.spec() for slot in layout.slots]
        if one_token:
            loop_inputs = specs
            specs = [TensorSpec(s.name, s.dtype, one_token_dims(s.dims)) for s in specs]
        outputs = task.outputs(config) + [slot.output_name for slot in layout.slots]
    names = _contract_names(specs, layout)
    program, traced_model, bounds = None, model, []
    cache: tuple[set[str] | None, int] | None = None
    if replicating:
        program, traced_model, bounds = _trace_replicated(
            config, task, dtype, implementations, specs, plan, buffer_values
        )
        if program is not None and task.supports_cache:
            cache = _cut_cache(config, task, dtype, implementations, plan)
        if cache is None and task.supports_cache:
            probed = _try_probe(model)
    if cache is None:
        cache = _cache_summary(probed)
    if program is None:
        wrapper = _TaskWrapper(model, task, names, layout)
        program, traced_model = (
            _export(wrapper, specs, config, task, dtype, "meta", one_token),
            model,
        )
        bounds = wrapper.length_guards
    if layout is not None and not one_row_per_new_token(program, specs):
        raise UnsupportedError(
            "with a past, the model's logits do not have one row per new token (it expects the "
            "whole sequence again at every step)"
        )
    constants = {
        k: v
        for k, v in program.constants.items()
        if isinstance(v, torch.Tensor) and v.device.type != "meta"
    }
    if _meta_constants(program, buffer_values):
        constants.update(
            _recompute_constants(
                program, specs, config, task, dtype, implementations, layout, one_token
            )
        )
    return TracedModel(
        program=program,
        inputs=specs,
        outputs=outputs,
        buffer_values=buffer_values,
        tied_names=tied,
        key_to_param=key_to_param,
        constant_values={k.removeprefix(WRAPPER_PREFIX): v for k, v in constants.items()},
        dtype=dtype,
        hf_config=config.hf_config,
        causal=task.supports_cache,
        padding_input=task.padding_mask_input,
        attention_declines={
            path: module._mobius_declined
            for path, module in traced_model.named_modules()
            if isinstance(getattr(module, "_mobius_declined", None), str)
        },
        module_classes=classes,
        cache_in_graph=layout is not None,
        state_kinds=cache[0],
        kv_layers=cache[1],
        loop_inputs=loop_inputs,
        length_bounds=bounds,
    )


def _trace_replicated(
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    implementations: tuple[str, ...] | None,
    specs: list[TensorSpec],
    plan: replicate.LayerPlan,
    buffer_values: dict[str, torch.Tensor],
) -> tuple[torch.export.ExportedProgram | None, torch.nn.Module | None, list[LengthBound]]:
    """A prefix of the layers traced, the rest copies of it (``mobius/synth/replicate.py``), and
    the length bounds checked in the graph; (None, None, []) where the trace shows that
    replication would not give what the full trace gives."""
    small = dataclasses.replace(config, hf_config=replicate.reduced_config(config.hf_config, plan))
    try:
        model = instantiate_on_meta(small, task, dtype, implementations)
    except (ConfigError, UnsupportedError) as exc:
        log.info("tracing every layer (the cut model does not build: %s)", exc)
        return None, None, []
    if not replicate.same_layers(model, plan):
        log.info("tracing every layer (the cut model's layers are not the full model's)")
        return None, None, []
    model.tie_weights()
    model = model.to("meta")
    wrapper = _TaskWrapper(model, task, [s.name for s in specs], None)
    program = _export(wrapper, specs, config, task, dtype, "meta")
    declined = any(isinstance(getattr(m, "_mobius_declined", None), str) for m in model.modules())
    if declined or _meta_constants(program, buffer_values):
        log.info("tracing every layer (the two-layer trace declined attention or has constants)")
        return None, None, []
    program = decompose_unlowered(program)  # before replicating: it re-traces the program
    try:
        replicate.replicate(program, plan)
    except replicate.NotReplicable as exc:
        log.info("tracing every layer: %s", exc)
        return None, None, []
    log.info(
        "traced %d of %d layers (%d kinds); the rest are copies",
        plan.traced,
        plan.count,
        len(plan.signatures),
    )
    return program, model, wrapper.length_guards


def _cache_summary(probed: CacheLayout | None) -> tuple[set[str] | None, int]:
    """(the cache-layer attributes the model fills, how many layers hold growing keys and values);
    (None, 0) where the probe failed."""
    if probed is None:
        return None, 0
    return {s.attribute for s in probed.slots}, len({s.layer for s in probed.slots if s.grows})


def _cut_cache(
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    implementations: tuple[str, ...] | None,
    plan: replicate.LayerPlan,
) -> tuple[set[str] | None, int] | None:
    """``_cache_summary`` of the full model from a probe of a fresh copy of the replicated cut
    model: a copied layer holds what the traced layer it copies holds (replication checked that
    the two are the same kind). None where the cut model's probe fails (the full one is probed)."""
    small = dataclasses.replace(config, hf_config=replicate.reduced_config(config.hf_config, plan))
    model = instantiate_on_meta(small, task, dtype, implementations)
    model.tie_weights()
    probed = _try_probe(model.to("meta"))
    if probed is None:
        return None
    attributes, _ = _cache_summary(probed)
    growing = {s.layer for s in probed.slots if s.grows}
    if not growing <= set(range(plan.traced)):
        return None
    copies = sum(plan.representative(kind)[0] in growing for kind in plan.kinds[plan.traced :])
    return attributes, len(growing) + copies


def one_token_dims(dims: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """``dims`` with the sequence axis fixed to one token."""
    return tuple(1 if d == SEQUENCE else d for d in dims)


def _try_probe(model: torch.nn.Module) -> CacheLayout | None:
    """The model's own cache layout, when a meta call with a cache works (else None)."""
    try:
        return probe_layout(model)
    except UnsupportedError:
        return None


def _contract_names(specs: list[TensorSpec], layout: CacheLayout | None) -> list[str]:
    """The task's own inputs: every spec but the trailing cache states."""
    count = len(specs) - (len(layout.slots) if layout is not None else 0)
    return [s.name for s in specs[:count]]
