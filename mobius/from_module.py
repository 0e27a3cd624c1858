"""``build_module``: a plain ``nn.Module`` (not a transformers model) through the same trace,
match, emit and package steps as a checkpoint.

The module takes the checkpoint's place: the trace builds a copy of it (parameters on the meta
device, buffers with their values) where it would build the HF class from a config, and its
parameters and persistent buffers are the weights, by state-dict key. With a task, the module
is called with the task's contract (``CONTRACTS.md``) and its graph follows that contract,
KV cache included where the module carries one; without, its own inputs and outputs.

The build driver for a module, beside ``mobius.convert`` (the one for a checkpoint), whose
``package`` it shares; ``mobius.build_module`` and ``mobius.explain_module`` call it.
"""

from __future__ import annotations

import copy
import functools
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mobius import failures
from mobius.convert import package, parse_dtype
from mobius.errors import ConfigError, UnsupportedError
from mobius.output.weights import Checkpoint
from mobius.report import ExplainReport
from mobius.sources.config import ArchitectureConfig, plain_architecture
from mobius.sources.resolve import Source
from mobius.sources.safetensors_header import TensorEntry, stored_name
from mobius.synth.chain import Prepared
from mobius.synth.prepare import trace_task
from mobius.tasks import ALIASES, TASKS, Task
from mobius.tasks.module_call import ModuleCall, flatten_outputs

Inputs = Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor
REPORT_HINT = "mobius.explain_module(module, example_inputs)"


class GivenModule:
    """``from_config`` as the trace calls it, for a module already built: a copy of it with its
    parameters on the meta device (no memory) and its buffers' values kept."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def from_config(self, config: Any, *, dtype: torch.dtype | None = None, **_: Any) -> Any:
        memo: dict[int, Any] = {
            id(p): torch.nn.Parameter(torch.empty_like(p, device="meta"), p.requires_grad)
            for _, p in self.module.named_parameters(remove_duplicate=False)
        }
        try:
            made = copy.deepcopy(self.module, memo)
        except Exception as exc:
            failures.raise_if_fatal(exc)
            raise ConfigError(
                f"build_module copies the module to trace it, and {type(self.module).__name__} "
                f"cannot be copied ({type(exc).__name__}: {exc}); make it deep-copyable"
            ) from None
        if dtype is not None:
            made = made.to(dtype)  # floating parameters and buffers, as module.to(dtype)
        made.forward = _on_input_device(made.forward)
        return made


def _on_input_device(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` making the tensors it creates without a device where its inputs are (on the
    meta device while tracing), as they are on the one device a plain module usually runs on."""

    @functools.wraps(forward)
    def on_input_device(*args: Any, **kwargs: Any) -> Any:
        given = (a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        first = next(given, None)
        if first is None:
            return forward(*args, **kwargs)
        with torch.device(first.device):
            return forward(*args, **kwargs)

    return on_input_device


class ModuleWeights(Checkpoint):
    """A module's parameters and persistent buffers by state-dict key, in memory."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.tensors = {k: v.detach() for k, v in module.state_dict().items()}
        where = Path(f"<{type(module).__name__}>")
        super().__init__(
            {
                k: TensorEntry(k, where, stored_name(v.dtype), tuple(v.shape))
                for k, v in self.tensors.items()
            }
        )

    def load(self, key: str) -> torch.Tensor:
        return self.tensors[key]


def named_inputs(module: torch.nn.Module, example_inputs: Inputs) -> dict[str, torch.Tensor]:
    """The example inputs by the names ``module.forward`` takes them (a sequence is positional)."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if isinstance(example_inputs, Mapping):
        named = dict(example_inputs)
    else:
        params = [
            p.name
            for p in inspect.signature(module.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(example_inputs) > len(params):
            raise ConfigError(
                f"{len(example_inputs)} example inputs, but {type(module).__name__}.forward "
                f"names {len(params)} positional parameters; pass the inputs as a dict by name"
            )
        named = dict(zip(params, example_inputs, strict=False))
    wrong = [k for k, v in named.items() if not isinstance(v, torch.Tensor)]
    if wrong:
        raise ConfigError(f"example inputs must be tensors; {', '.join(wrong)} are not")
    return named


def module_task(
    module: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    task: str | None,
    dynamic_axes: Mapping[str, Mapping[int, str]] | None,
    arch: ArchitectureConfig,
) -> Task:
    """The task the module is traced for: a contract of ``TASKS`` (whose inputs the example
    inputs must be among) or the module's own I/O."""
    if task is None:
        outputs = _output_names(module, inputs)
        if len(set(outputs)) != len(outputs):
            raise ConfigError(f"the module's outputs have clashing names: {outputs}")
        the_task: Task = ModuleCall(inputs, outputs, dynamic_axes)
    else:
        name = ALIASES.get(task, task)
        single = [n for n, t in TASKS.items() if not _multi_graph(t)]
        if name not in single:
            raise ConfigError(
                f"build_module takes a single-graph task or none; '{task}' is not one of: "
                + ", ".join(single)
            )
        the_task = copy.copy(TASKS[name])
        contract = [s.name for s in the_task.inputs(arch, module)]
        other = [k for k in inputs if k not in contract]
        if other:
            raise ConfigError(
                f"with task {name} the graph takes {', '.join(contract)}; the example inputs "
                f"{', '.join(other)} are none of them (leave task out for the module's own inputs)"
            )
    the_task.auto_class = lambda config: GivenModule(module)  # the module instead of a class
    return the_task


def _output_names(module: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> list[str]:
    """The names of what ``module`` returns, from a call of its meta copy in eval mode (the
    module itself is not run: in training mode a call would change its statistics)."""
    made = GivenModule(module).from_config(None).eval()
    on_meta = {k: torch.empty_like(v, device="meta") for k, v in inputs.items()}
    try:
        with torch.no_grad():
            returned = made(**on_meta)
    except Exception as exc:
        failures.check(exc)
        raise UnsupportedError(
            f"{type(module).__name__} does not run on its example inputs on the meta device "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
        ) from exc
    return [name for name, _ in flatten_outputs(returned)]


def _multi_graph(task: Task) -> bool:
    from mobius.synth.graphs import is_multi_graph

    return is_multi_graph(task)


def prepare_module(
    module: torch.nn.Module,
    example_inputs: Inputs,
    *,
    task: str | None,
    dtype: torch.dtype,
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
) -> Prepared:
    """``prepare`` for a module: its task, its weights in memory, the traced graph."""
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"build_module needs a torch.nn.Module, got {type(module).__name__}")
    name = type(module).__name__
    arch = plain_architecture(name, _no_config())
    with failures.phase(f"reading {name}"):
        inputs = named_inputs(module, example_inputs)
        the_task = module_task(module, inputs, task, dynamic_axes, arch)
    source = Source(directory=Path(f"<{name}>"), config={}, checkpoint=ModuleWeights(module))
    return trace_task(source, arch, the_task, dtype)


def _no_config() -> Any:
    """A transformers config with nothing set: every field a pattern reads is absent, and no
    labels (``mobius.json`` names none)."""
    from transformers import PretrainedConfig

    config = PretrainedConfig()
    config.id2label = None
    return config


def build_module(
    module: torch.nn.Module,
    example_inputs: Inputs,
    *,
    task: str | None = None,
    dtype: str = "f32",
    strict: bool = False,
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
) -> Any:
    """``mobius.build_module``: the ModelPackage of ``module`` (see there)."""
    started = time.perf_counter()
    prepared = prepare_module(
        module, example_inputs, task=task, dtype=parse_dtype(dtype), dynamic_axes=dynamic_axes
    )
    return package(
        prepared,
        src=type(module).__name__,
        report_hint=REPORT_HINT,
        dtype=dtype,
        weights=True,
        strict=strict,
        quantization=None,
        scheme=None,
        ep=None,
        accuracy_level=0,
        started=started,
        extra_files=[],
    )


def explain_module(
    module: torch.nn.Module,
    example_inputs: Inputs,
    *,
    task: str | None = None,
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
) -> ExplainReport:
    """``mobius.explain_module``: what every submodule of ``module`` becomes."""
    from mobius.synth.analysis import analyze

    prepared = prepare_module(
        module, example_inputs, task=task, dtype=torch.float32, dynamic_axes=dynamic_axes
    )
    with failures.phase(f"matching patterns in {prepared.arch.model_type}"):
        return ExplainReport.from_analysis(analyze(prepared), source=type(module).__name__)
