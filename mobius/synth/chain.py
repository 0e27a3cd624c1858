"""One graph traced down the fallback chain: attention captured as fused calls, else the cache
carried through the trace by transformers' own ``Cache`` (one token at a time where the model
loops), else no cache. Each step down is a ``Fallback`` recorded on the result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from torch.export.graph_signature import InputKind

from mobius import failures
from mobius.errors import UnsupportedError
from mobius.fallbacks import (
    ANY_LENGTH,
    CARRIED_CACHE,
    FUSED_ATTENTION,
    KV_CACHE,
    LENGTH_BOUND,
    MODEL_ATTENTION,
    NO_CACHE,
    ONE_TOKEN_LOOP,
    PARALLEL_PREFILL,
    Fallback,
)
from mobius.sources.config import ArchitectureConfig
from mobius.sources.resolve import Source
from mobius.synth.emit import attention_captured, bidirectional_attention, unclaimed_attention
from mobius.synth.trace import SpecialisedShapeError, TracedModel, trace
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
    cache_blocker: str | None = None  # why captured attention could not carry the cache
    fallbacks: list[Fallback] = field(default_factory=list)  # the steps down the chain, in order
    # why the capture missed each module of ``unclaimed_attention`` (single-graph tasks)
    attention_reasons: dict[str, str] = field(default_factory=dict)


def length_bound_fallback(traced: TracedModel) -> Fallback:
    """The graph holds up to a length only: the model branches on it in Python (BigBird's full
    attention below its block-sparse length), or only where input sizes keep a relation (diffusers'
    ``shape_relations``). Checked at run time (``trace_bounds.guard_lengths``)."""
    bounds = ", ".join(map(str, traced.length_bounds))
    if not all(hasattr(b, "upper") for b in traced.length_bounds):  # a relation between sizes
        return Fallback(
            LENGTH_BOUND,
            f"the model's Python code assumed a relation between input sizes, and the trace "
            f"holds only for {bounds}; an input outside it stops the graph (Gather index out of "
            "range)",
            (ANY_LENGTH,),
        )
    return Fallback(
        LENGTH_BOUND,
        f"the model branches on the sequence length in Python, and the trace holds only for "
        f"{bounds}; a longer input stops the graph (Gather index out of range) instead of "
        "getting the other branch",
        (ANY_LENGTH,),
    )


def trace_with_fallbacks(
    source: Source, arch: ArchitectureConfig, the_task: Task, dtype: torch.dtype
) -> Prepared:
    use_cache = the_task.supports_cache
    fallback = tuple(i for i in the_task.attention_implementations if i != "mobius")
    first_error: UnsupportedError | None = None
    taken: list[Fallback] = []
    traced: TracedModel | None
    reasons: dict[str, str] = {}
    try:
        traced = trace(arch, the_task, dtype)
    except UnsupportedError as exc:
        if fallback == the_task.attention_implementations:
            raise
        # a model that reads the mask outside attention (DSA's indexer) sees none when captured;
        # a Python loop over tokens fixes the sequence length: trace the model's own attention
        first_error, traced, unclaimed = exc, None, []
        reason = str(exc).removeprefix("torch.export could not trace ")
        blocker: str | None = f"the model cannot be traced with the captured attention ({reason})"
    else:
        # with a cache: every layer must be captured; without: an escape lost its padding mask
        tried_capture = "mobius" in the_task.attention_implementations
        unclaimed = unclaimed_attention(traced) if use_cache or tried_capture else []
        blocker = _captured_cache_blocker(traced, unclaimed) if use_cache else None
        if unclaimed and not use_cache:
            reasons = _uncaptured_reasons(traced, unclaimed)
            if traced.attention_declines or the_task.padding_mask_input in {
                s.name for s in traced.inputs
            }:
                # a single graph: a declined call ran transformers' sdpa without the mask, and
                # attention the capture missed lost the model-level padding mask ("mobius" skips
                # it): trace the model's own attention, lowered op by op
                log.info("attention op by op: %s", "; ".join(sorted(set(reasons.values()))))
                traced = _trace_without_cache(arch, the_task, dtype, fallback, None)
                taken.append(
                    Fallback(
                        MODEL_ATTENTION,
                        "; ".join(sorted(set(reasons.values()))),
                        (FUSED_ATTENTION,),
                    )
                )
            # else nothing is padded (pixel inputs): the captured layers stay fused, and the
            # uncaptured attention (a pooling head) is lowered op by op as traced
    failures.stop_checkpoint()
    if blocker is not None and use_cache:
        # the captured attention cannot carry this model's cache: let transformers' own Cache do
        # it inside the trace, with the model's own attention lowered op by op
        log.info("tracing again, carrying transformers' own cache through the trace")
        try:
            traced = trace_carrying_cache(arch, the_task, dtype, fallback)
            taken.append(Fallback(CARRIED_CACHE, blocker, (FUSED_ATTENTION,)))
            if traced.loop_inputs:
                taken.append(
                    Fallback(
                        ONE_TOKEN_LOOP,
                        "the trace fixes the sequence length (the model loops over tokens)",
                        (FUSED_ATTENTION, PARALLEL_PREFILL),
                    )
                )
        except UnsupportedError as exc:
            use_cache = False
            if isinstance(exc, BidirectionalError):
                blocker = str(exc)
            else:
                blocker = f"{blocker}; carrying transformers' cache through the trace failed: {exc}"
            lost = (
                (KV_CACHE,) if traced is not None and not unclaimed else (KV_CACHE, FUSED_ATTENTION)
            )
            taken.append(Fallback(NO_CACHE, blocker, lost))
            if traced is None or unclaimed:
                traced = _trace_without_cache(arch, the_task, dtype, fallback, first_error)
            if isinstance(exc, BidirectionalError):
                unclaimed = []  # no pattern would give it a cache: nothing to report per module
    elif traced is None:
        traced = _trace_without_cache(arch, the_task, dtype, fallback, first_error)
        taken.append(Fallback(MODEL_ATTENTION, blocker or str(first_error), (FUSED_ATTENTION,)))
    return Prepared(source, arch, the_task, traced, use_cache, unclaimed, blocker, taken, reasons)


def _trace_without_cache(
    arch: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    implementations: tuple[str, ...],
    first_error: UnsupportedError | None,
) -> TracedModel:
    """transformers' own attention, no cache; if that fails too, the first trace's error."""
    try:
        return trace(arch, task, dtype, implementations)
    except UnsupportedError:
        if first_error is not None:
            raise first_error from None
        raise


def trace_carrying_cache(
    arch: ArchitectureConfig, task: Task, dtype: torch.dtype, implementations: tuple[str, ...]
) -> TracedModel:
    """The trace with the cache as inputs and outputs; one token at a time if the model loops."""
    try:
        traced = trace(arch, task, dtype, implementations, carry_cache=True)
    except SpecialisedShapeError as exc:
        log.info("tracing one token at a time (%s)", exc)
        traced = trace(arch, task, dtype, implementations, carry_cache=True, one_token=True)
    # with the model's own attention, its masks are real: all of them without a query/key position
    # comparison means an encoder, which no cache can reproduce
    if bidirectional_attention(traced):
        raise BidirectionalError(
            "the model's attention is bidirectional (its mask never compares query and key "
            "positions), so a KV cache cannot reproduce it"
        )
    return traced


class BidirectionalError(UnsupportedError):
    """The model attends both ways: it converts, but without a cache."""


def _uncaptured_reasons(traced: TracedModel, unclaimed: list[str]) -> dict[str, str]:
    """Why attention in each of ``unclaimed`` was not captured: the reason the capture declined
    the call with, or that the module does not call transformers' AttentionInterface."""

    def related(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    reasons = {}
    for path in unclaimed:
        declined = [r for p, r in traced.attention_declines.items() if related(p, path)]
        reasons[path] = (
            f"the capture declined the call: {declined[0]}"
            if declined
            else "this attention does not call transformers' AttentionInterface"
        )
    return reasons


def _captured_cache_blocker(traced: TracedModel, unclaimed: list[str]) -> str | None:
    """Why captured attention layers alone cannot carry this model's cache, or None if they can."""
    if unclaimed:
        shown = ", ".join(unclaimed[:4]) + (
            f" and {len(unclaimed) - 4} more" if len(unclaimed) > 4 else ""
        )
        return f"attention not captured in {shown}"
    if not _reads_input(traced, "position_ids"):
        # positions come from the cache length inside the model (BART-style learned positions);
        # traced without a cache, that length is always 0
        return "the model ignores position_ids (it counts positions from its cache length)"
    extra = sorted((traced.state_kinds or set()) - {"keys", "values"})
    if extra:
        return (
            f"the model's cache also holds {', '.join(extra)} (recurrent or convolutional layers)"
        )
    layers = [
        n.args[3]
        for n in traced.program.graph.nodes
        if n.op == "call_function" and n.target is torch.ops.mobius.attention.default
    ]
    probed = traced.state_kinds is not None
    if probed and layers and (len(set(layers)) != len(layers) or len(layers) != traced.kv_layers):
        return (
            f"{len(layers)} captured attention calls for {traced.kv_layers} cache layers "
            "(keys and values shared or skipped across layers)"
        )
    if not layers and not attention_captured(traced):
        # attention in modules not named for it (a checkpoint's own code, a plain module)
        return "no attention was captured, so the graph would hold no KV cache"
    return None


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
