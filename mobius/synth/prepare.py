"""The steps every entry point shares: resolve, configure, pick the task, trace (with fallback)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import torch
from torch.export.graph_signature import InputKind

from mobius import config as config_mod
from mobius import source as source_mod
from mobius.config import ArchitectureConfig
from mobius.errors import UnsupportedError
from mobius.registry import get_task
from mobius.source import Source
from mobius.synth.decompose import decompose_unlowered
from mobius.synth.emit import unclaimed_attention
from mobius.synth.trace import TracedModel, trace
from mobius.tasks import Task

log = logging.getLogger("mobius")


@dataclass
class Prepared:
    """A traced model ready to emit, and what the driver decided on the way."""

    source: Source
    arch: ArchitectureConfig
    task: Task
    traced: TracedModel
    use_cache: bool
    unclaimed_attention: list[str] = field(default_factory=list)
    cache_blocker: str | None = None  # why there is no cache, when it is not uncaptured attention


def prepare(
    src: str | os.PathLike,
    *,
    dtype: torch.dtype,
    task: str | None,
    weights: bool,
    trust_remote_code: bool,
) -> Prepared:
    """Resolve ``src``, trace it on meta, and fall back to a cache-less trace if attention escapes."""
    source = source_mod.resolve(src, trust_remote_code=trust_remote_code, need_weights=weights)
    hf_config = config_mod.hf_config_from_dict(source.config, trust_remote_code=trust_remote_code)
    arch = config_mod.from_hf(hf_config)
    the_task = get_task(task, arch)
    log.info("tracing %s as %s on the meta device", arch.model_type, the_task.name)
    traced, blocker = _trace_or_fall_back(arch, the_task, dtype)
    use_cache = the_task.supports_cache and blocker is None
    unclaimed = unclaimed_attention(traced) if use_cache else []
    if unclaimed:
        # Layers that bypass the attention interface build their own masks, which the capture
        # switched off: trace again with transformers' own attention, and give up the cache.
        use_cache = False
        shown = ", ".join(unclaimed[:4]) + (
            f" and {len(unclaimed) - 4} more" if len(unclaimed) > 4 else ""
        )
        log.warning("building without a KV cache: attention not captured in %s", shown)
        fallback = tuple(i for i in the_task.attention_implementations if i != "mobius")
        traced = trace(arch, the_task, dtype, fallback)
    if use_cache and not _reads_input(traced, "position_ids"):
        # positions come from the cache length inside the model (BART-style learned positions);
        # traced without a cache, that length is always 0, so decode steps would reuse position 0
        use_cache = False
        blocker = "the model ignores position_ids (it counts positions from its cache length)"
        log.warning("building without a KV cache: %s", blocker)
    traced.program = decompose_unlowered(traced.program)
    return Prepared(source, arch, the_task, traced, use_cache, unclaimed, blocker)


def _trace_or_fall_back(
    arch: ArchitectureConfig, task: Task, dtype: torch.dtype
) -> tuple[TracedModel, str | None]:
    """Trace with the task's attention implementations; if the captured attention breaks the trace
    (a model that reads the attention mask outside attention, like DSA's indexer, sees no mask),
    trace with transformers' own attention instead, with no cache. Returns why there is none."""
    try:
        return trace(arch, task, dtype), None
    except UnsupportedError as exc:
        fallback = tuple(i for i in task.attention_implementations if i != "mobius")
        if fallback == task.attention_implementations:
            raise
        try:
            traced = trace(arch, task, dtype, fallback)
        except UnsupportedError:
            raise exc from None
        reason = str(exc).removeprefix("torch.export could not trace ")
    blocker = f"the model cannot be traced with the captured attention ({reason})"
    log.warning("building without a KV cache: %s", blocker)
    return traced, blocker


def _reads_input(traced: TracedModel, name: str) -> bool:
    """Whether the traced graph uses the task input ``name`` at all."""
    program = traced.program
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user_inputs = [
        node for node, spec in zip(placeholders, program.graph_signature.input_specs, strict=True)
        if spec.kind == InputKind.USER_INPUT
    ]  # fmt: skip
    names = [s.name for s in traced.inputs]
    return name in names and bool(user_inputs[names.index(name)].users)
