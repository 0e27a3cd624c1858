"""Build a diffusers model on the meta device and trace one of its graphs with torch.export.

The same steps as ``mobius.synth.trace.trace`` (the wrapper, export with dynamic named axes, the
checks on specialised dimensions), with diffusers' own construction: ``cls.from_config`` with
parameters on meta and buffers computed on CPU. diffusers' state-dict keys are its checkpoint
keys, so no renaming is needed (``key_to_param`` is None).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch

from mobius import failures
from mobius.diffusers.config import model_class
from mobius.diffusers.overrides import install as install_overrides
from mobius.diffusers.shape_relations import (
    NEUTRAL_BATCH_BOUND,
    ShapeRelation,
    checkable,
    undeclared_relations,
)
from mobius.diffusers.shared_modules import attach, shared_config
from mobius.diffusers.tasks import HEIGHT, LENGTH, SAMPLE_HEIGHT, SAMPLE_WIDTH, WIDTH, fixed_axes
from mobius.errors import ConfigError, UnsupportedError
from mobius.sources.config import ArchitectureConfig
from mobius.synth.inline import inline_grad_regions
from mobius.synth.lifted_constants import match_constants
from mobius.synth.meta_model import BUILD_ERRORS, quiet
from mobius.synth.shims import unchecked_distributions
from mobius.synth.trace import (
    SpecialisedShapeError,
    TracedModel,
    _meta_constants,
    _TaskWrapper,
    _tied_groups,
)
from mobius.synth.trace_bounds import (
    LengthBound,
    length_bounds,
    sizes_an_equality_rules_out,
    specialised_dims,
    user_inputs,
)
from mobius.tasks import Task
from mobius.tasks.base import BATCH
from patterns.base import WRAPPER_PREFIX

log = logging.getLogger("mobius")


def instantiate(arch: ArchitectureConfig, dtype: torch.dtype, device: str = "meta") -> Any:
    """The diffusers model of ``arch`` in eval mode; parameters on meta unless ``device`` is cpu
    (uninitialised storage, used only to recompute constants)."""
    from accelerate import init_empty_weights

    cls = model_class(arch.model_type)
    values, shared = shared_config(arch.hf_config.to_dict())  # a sibling's modules it runs on
    try:
        with init_empty_weights(include_buffers=False), quiet():
            model = cls.from_config(values)
            model = attach(model, shared) if shared else model
    except BUILD_ERRORS + (ValueError, KeyError) as exc:
        failures.check(exc)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(
            f"diffusers cannot build a {arch.model_type} from config.json "
            f"({type(exc).__name__}: {reason}); fix config.json"
        ) from exc
    if dtype != torch.float32:  # diffusers warns on every .to(dtype) of a model
        with _diffusersquiet():
            model = model.to(dtype)
    model = model.eval()
    install_overrides(model)
    if device != "meta":
        model = model.to_empty(device=device)
    return model


@contextlib.contextmanager
def _autocast_on_meta() -> Iterator[None]:
    """``torch.autocast(x.device.type, ...)`` traced on meta autocasts as on CPU (Mochi's and
    Lumina's rotary embeddings open one on their input's device; torch has no meta autocast)."""
    cls = torch.autocast
    original = cls.__init__

    def init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        original(self, "cpu" if device_type == "meta" else device_type, *args, **kwargs)

    cls.__init__ = init
    try:
        yield
    finally:
        cls.__init__ = original


@contextlib.contextmanager
def _diffusersquiet() -> Iterator[None]:
    logger = logging.getLogger("diffusers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def trace_component(arch: ArchitectureConfig, task: Task, dtype: torch.dtype) -> TracedModel:
    """Trace ``task``'s graph of the diffusers model ``arch`` on meta."""
    model = instantiate(arch, dtype)
    buffer_values = {
        name: b.detach().clone() for name, b in model.named_buffers() if b.device.type != "meta"
    }
    tied = _tied_groups(model)
    classes = {
        name: f"{type(mod).__module__}.{type(mod).__qualname__}"
        for name, mod in model.named_modules()
    }
    model = model.to("meta")
    specs = task.inputs(arch, model)
    names = [s.name for s in specs]
    wrapper = _TaskWrapper(model, task, names, None)
    program = export(wrapper, specs, arch, task, dtype, "meta")
    unread = unread_inputs(program, specs) & task.optional_inputs(arch)
    if unread:  # an optional argument this config never reads is no graph input
        return trace_component(arch, fixed_axes(task, arch, {}, frozenset(unread)), dtype)
    constants = {
        k: v
        for k, v in program.constants.items()
        if isinstance(v, torch.Tensor) and v.device.type != "meta"
    }
    if _meta_constants(program, buffer_values):  # tensors built inside forward: values on CPU
        real = _TaskWrapper(instantiate(arch, dtype, device="cpu"), task, names, None)
        real.length_guards = wrapper.length_guards
        again = export(real, specs, arch, task, dtype, "cpu")
        constants.update(match_constants(program, again))  # by order, shape and dtype
    return TracedModel(
        program=program,
        inputs=specs,
        outputs=task.outputs(arch),
        buffer_values=buffer_values,
        tied_names=tied,
        key_to_param=None,
        constant_values={k.removeprefix(WRAPPER_PREFIX): v for k, v in constants.items()},
        dtype=dtype,
        hf_config=arch.hf_config,
        causal=False,
        padding_input=None,
        module_classes=classes,
        length_bounds=list(wrapper.length_guards),
    )


# the trace limit for other bounds (as transformers models without a position table)
LENGTH_LIMIT = 256
# pipelines give latents whose height and width are multiples of this (the largest down-sampling
# factor of a UNet or VAE on latents): a guard that rules out only other sizes is accepted
LATENT_MULTIPLE = 8


def export(
    wrapper: torch.nn.Module,
    specs: list,
    arch: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    device: str,
) -> torch.export.ExportedProgram:
    """torch.export with the contract's named axes dynamic; a dimension the trace fixes, or
    bounds by a branch that changes values, is refused (SpecialisedShapeError).

    Two kinds of guard are accepted: the batch bound of diffusers' upsampler (above), and a
    height or width that must not take some sizes, none of them a multiple of LATENT_MULTIPLE:
    UNets pass explicit up-sampling sizes only when the size is no multiple of their
    down-sampling factor, which pipelines never give (latents are a multiple of it). Any other
    equality on one size is refused, the frame count's included: CogVideoX's VAE decodes
    ``max(frames // 2, 1)`` chunks in a Python loop, which the trace unrolls at the traced count
    and records only as ``Max(1, frames // 2) == 2``; it fails at 2 and at 6 frames on, so the
    graph, its frame axis left dynamic, gave wrong frames at every other size."""
    args = tuple(torch.zeros_like(task.example_value(s, arch, dtype), device=device) for s in specs)
    dynamic = tuple(
        {axis: torch.export.Dim.AUTO for axis, d in enumerate(s.dims) if isinstance(d, str)}
        for s in specs
    )
    try:
        with quiet(), unchecked_distributions(), _autocast_on_meta():
            program = torch.export.export(wrapper, args, dynamic_shapes=(dynamic,), strict=False)
    except Exception as exc:
        failures.check(exc)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedError(
            f"torch.export could not trace {arch.model_type} ({type(exc).__name__}: {first[:300]})"
        ) from exc
    fixed = specialised_dims(program, specs)
    if fixed:
        raise _shape_error(
            f"torch.export fixed dynamic dimensions of {arch.model_type} to constants: "
            + ", ".join(fixed),
            fixed,
            specs,
        )
    guarded = wrapper.length_guards
    bounded = [b for b in unaccepted_bounds(program, specs) if b not in guarded]
    if bounded and not guarded and all(b.ruled_out is None for b in bounded):
        # a size range the model itself keeps (Wan's rotary table of rope_max_seq_len positions,
        # sliced by the patch count): kept, and checked in the graph (trace_bounds.guard_lengths)
        wrapper.length_guards = bounded
        return export(wrapper, specs, arch, task, dtype, device)
    if bounded:
        shown = [str(b) for b in bounded]
        raise _shape_error(
            f"the trace of {arch.model_type} holds only for " + ", ".join(shown), shown, specs
        )
    related = [r for r in undeclared_relations(program, specs, arch.hf_config) if r not in guarded]
    if related:
        return _guard_relations(wrapper, related, specs, arch, task, dtype, device)
    return inline_grad_regions(program)


def _guard_relations(
    wrapper: torch.nn.Module,
    related: list[ShapeRelation],
    specs: list,
    arch: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    device: str,
) -> torch.export.ExportedProgram:
    """A relation between input sizes the trace holds for and the contract does not declare
    (``shape_relations``): checked in the graph, as a bound, and the model traced again; one the
    graph cannot compute is refused (SpecialisedShapeError, naming its axes)."""
    shown = [f"{r} (fails at {r.example}; {r.where})" for r in related]
    if not all(checkable(r) for r in related):
        named = [f"{name}[{axis}]" for r in related for name, axis in r.axes]
        raise _shape_error(
            f"the trace of {arch.model_type} holds only for " + ", ".join(shown), named, specs
        )
    log.warning("%s's %s holds only for %s: checked in the graph", arch.model_type, task.name,
                "; ".join(shown))  # fmt: skip
    wrapper.length_guards = [*wrapper.length_guards, *related]
    return export(wrapper, specs, arch, task, dtype, device)


def unread_inputs(program: torch.export.ExportedProgram, specs: list) -> set[str]:
    """The names of the inputs no node of ``program`` reads."""
    return {
        spec.name for spec, node in zip(specs, user_inputs(program), strict=True) if not node.users
    }


def _shape_error(message: str, found: list[str], specs: list) -> SpecialisedShapeError:
    """The error, with ``axes``: the names of the contract axes ``found`` mentions (``batch``,
    ``num_frames``, ...), so that a caller can retrace with those fixed."""
    exc = SpecialisedShapeError(message)
    words = " " + " ".join(found).replace("=", " ") + " "
    exc.axes = {
        d
        for s in specs
        for axis, d in enumerate(s.dims)
        if isinstance(d, str) and f" {s.name}[{axis}] " in words
    }
    return exc


def unaccepted_bounds(program: torch.export.ExportedProgram, specs: list) -> list[LengthBound]:
    """The bounds and ruled-out sizes of named dimensions the trace holds for, less the accepted
    guards (``export``)."""
    symbols = {
        (spec.name, axis): node.meta["val"].shape[axis]
        for spec, node in zip(specs, user_inputs(program), strict=True)
        for axis in range(len(spec.dims))
    }
    found = []
    # LENGTH_LIMIT + 1: a bound at the limit itself is the model's (MiniMax-H3's VAE encodes
    # frames of up to 256 pixels in one tile and tiles larger ones)
    for bound in length_bounds(program, specs, LENGTH_LIMIT + 1, lower_bounds=False):
        dim = next(s for s in specs if s.name == bound.input).dims[bound.axis]
        if dim == BATCH and bound.upper == NEUTRAL_BATCH_BOUND and bound.lower <= 2:
            continue
        size = symbols[(bound.input, bound.axis)]
        if (
            bound.ruled_out is not None
            and dim in (HEIGHT, WIDTH, LENGTH, SAMPLE_HEIGHT, SAMPLE_WIDTH)
            and not sizes_an_equality_rules_out(size, LENGTH_LIMIT, LATENT_MULTIPLE)
        ):
            continue
        found.append(bound)
    return found
