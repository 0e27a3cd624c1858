"""Tasks made of several graphs (encoder–decoder, vision–language): each graph traced on meta as
a one-graph task is, a causal decoder down the same fallback chain (``chain.py``), the others with
attention captured where the task captures it. ``mobius.convert.build_graphs`` then emits and
binds them side by side.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from mobius.errors import UnsupportedError
from mobius.fallbacks import CARRIED_CACHE, FUSED_ATTENTION, LENGTH_BOUND, Fallback, announce
from mobius.sources.config import ArchitectureConfig
from mobius.sources.resolve import Source
from mobius.synth.chain import (
    Prepared,
    length_bound_fallback,
    trace_carrying_cache,
    trace_with_fallbacks,
)
from mobius.synth.decompose import decompose_unlowered
from mobius.synth.trace import trace
from mobius.tasks import Task
from patterns import seq2seq_attention

log = logging.getLogger("mobius")


@dataclass
class PreparedGraphs:
    """One ``Prepared`` per graph of a multi-graph task, in the task's order."""

    source: Source
    arch: ArchitectureConfig
    task: Task
    graphs: dict[str, Any]  # graph name -> Prepared


def is_multi_graph(task: Task) -> bool:
    return bool(getattr(task, "graphs", None))


def prepare_graphs(
    source: Source, arch: ArchitectureConfig, task: Task, dtype: torch.dtype
) -> PreparedGraphs:
    """Trace every graph of ``task`` on meta. A causal decoder (a VLM's) takes the causal-LM
    chain; the others, when the task captures attention (``task.captures_attention``: the
    encoder-decoder graphs, ``patterns/seq2seq_attention.py``), are traced with attention
    captured as fused calls, and again with transformers' own attention, lowered op by op,
    where the capture does not wholly take it. A graph that cannot be traced is refused with
    what else converts the checkpoint (``task.alternative``)."""
    from mobius.synth.interface_use import may_call_attention_interface

    refusal = getattr(task, "refusal", lambda _: None)(arch)
    if refusal:
        raise UnsupportedError(refusal)
    graphs = {}
    capturable = not task.captures_attention or may_call_attention_interface(
        arch, task.graphs[0], dtype
    )
    for graph in task.graphs:
        if hasattr(graph, "for_config"):  # the graph's settings depend on the model (vlm.py)
            graph = graph.for_config(arch)
        log.info("tracing %s's %s", arch.model_type, graph.name)
        try:
            part = _prepare_graph(source, arch, task, graph, dtype, capturable)
            own = graph.fallbacks_taken(arch) if hasattr(graph, "fallbacks_taken") else []
            if own:  # the graph's contract narrowed (a VLM's vision graph to one image size)
                part.fallbacks.extend(own)
                announce(own)
        except UnsupportedError as exc:
            if task.alternative is None:
                raise
            raise UnsupportedError(f"{exc}; {task.alternative}") from exc
        _drop_dead_code(part.traced.program)
        part.traced.program = decompose_unlowered(part.traced.program)
        _record_length_bounds(part)
        graphs[graph.name] = part
    return PreparedGraphs(source, arch, task, graphs)


def _record_length_bounds(part: Any) -> None:
    """A graph kept up to a length only (checked in the graph, ``trace_bounds.guard_lengths``)
    is a fallback like a single-graph one: in ``mobius.json``, explain, and refused by strict."""
    if part.traced.length_bounds and all(f.kind != LENGTH_BOUND for f in part.fallbacks):
        part.fallbacks.append(length_bound_fallback(part.traced))
        announce(part.fallbacks[-1:])


def _prepare_graph(
    source: Source,
    arch: ArchitectureConfig,
    task: Task,
    graph: Task,
    dtype: torch.dtype,
    capturable: bool = True,
) -> Any:
    """One graph traced: a VLM's causal decoder by the causal-LM chain (or with the cache carried
    where the task says the captured attention cannot serve), an encoder-decoder's graphs with
    attention captured, the others as they are."""
    carried = getattr(graph, "carried_cache_reason", None)
    if carried:  # the task knows the captured attention cannot serve: carry the cache
        traced = trace_carrying_cache(arch, graph, dtype, graph.attention_implementations)
        taken = [Fallback(CARRIED_CACHE, carried, (FUSED_ATTENTION,))]
        part = Prepared(source, arch, graph, traced, use_cache=True, fallbacks=taken)
        announce(part.fallbacks)
        return part
    if graph.supports_cache:  # a causal decoder (a VLM's): the causal-LM chain
        part = trace_with_fallbacks(source, arch, graph, dtype)
        announce(part.fallbacks)
        return part
    if task.captures_attention:
        part = _prepare_captured(source, arch, graph, dtype, capturable)
        if getattr(graph, "loops_over_tokens", None):  # traced for one token: run per token
            part.traced.loop_inputs = graph.looped_inputs(part.traced.inputs)
        return part
    return Prepared(source, arch, graph, trace(arch, graph, dtype), use_cache=False)


def _prepare_captured(
    source: Source, arch: ArchitectureConfig, graph: Task, dtype: torch.dtype, capturable: bool
) -> Any:
    """The graph traced with its attention captured as fused calls, or, where the capture does
    not wholly take it, with transformers' own attention (the reasons kept for explain). Not
    ``capturable`` (no attention module names the interface): transformers' own attention at
    once, with the same reasons."""
    if not capturable:
        traced = trace(arch, graph, dtype)
        reasons = _uncaptured(traced)
    else:
        traced, reasons = _trace_captured(arch, graph, dtype)
    if reasons and capturable:
        log.info("%s: attention op by op: %s", graph.name, "; ".join(sorted(set(reasons.values()))))
        traced = trace(arch, graph, dtype)
    return Prepared(
        source,
        arch,
        graph,
        traced,
        use_cache=False,
        unclaimed_attention=sorted(reasons),
        attention_reasons=reasons,
    )


def _trace_captured(
    arch: ArchitectureConfig, graph: Task, dtype: torch.dtype
) -> tuple[Any, dict[str, str]]:
    """The trace with ``mobius_seq2seq`` attention, and the attention modules it did not capture
    (path -> reason; empty when every call became one fused node)."""
    seq2seq_attention.install()
    try:
        traced = trace(arch, graph, dtype, (seq2seq_attention.IMPLEMENTATION,))
    except UnsupportedError as exc:
        reason = str(exc).removeprefix("torch.export could not trace ")
        return None, {"": f"the model cannot be traced with the captured attention ({reason})"}
    return traced, _uncaptured(traced)


def _uncaptured(traced: Any) -> dict[str, str]:
    """Attention modules (innermost, by class name) that ran in the trace, dead code included,
    without becoming a ``mobius::seq2seq_attention`` node, with the reason."""
    from mobius.synth.emit import module_of, regions

    program = traced.program
    captured = {module_of(n)[0] for n in program.graph.nodes if n.target is seq2seq_attention.OP}
    ran = {r.path for r in regions(program) if r.path}
    names = [
        p for p, cls in traced.module_classes.items() if p and "Attention" in cls.rsplit(".", 1)[-1]
    ]
    leaves = [p for p in names if not any(o.startswith(p + ".") for o in names)]

    def inside(path: str, module: str) -> bool:
        return path == module or path.startswith(module + ".")

    out = {}
    for path in leaves:
        if any(inside(r, path) for r in ran) and not any(inside(c, path) for c in captured):
            out[path] = traced.attention_declines.get(
                path, "this attention does not call transformers' AttentionInterface"
            )
    for path, reason in traced.attention_declines.items():
        out.setdefault(path, reason)
    return out


def _drop_dead_code(program: torch.export.ExportedProgram) -> None:
    """Remove what no output reads (the encoder graph's placeholder decoder call). The graph's
    own ``eliminate_dead_code`` keeps it: shape assertions on dead tensors count as side effects.
    An assertion on live tensors stays."""
    graph = program.graph
    live: set[torch.fx.Node] = set()
    stack = [graph.output_node()]
    while True:
        while stack:
            node = stack.pop()
            if node not in live:
                live.add(node)
                stack.extend(node.all_input_nodes)
        # an in-place write through a view of a live tensor (Qwen3-VL's interleaved rotary
        # ``freqs[0][..., 1::3] = ...``) is live too: its result is read through the base
        stack = [n for n in graph.nodes if n not in live and _writes_into(n, live)]
        if not stack:
            break
    for node in reversed(list(graph.nodes)):
        if node.op != "call_function" or node in live or node.users:
            continue
        if node.all_input_nodes and all(i in live for i in node.all_input_nodes):
            continue  # an assertion about a live value
        graph.erase_node(node)
    program.graph_module.recompile()


def _writes_into(node: torch.fx.Node, live: set[torch.fx.Node]) -> bool:
    """``node`` writes in place into a live tensor, or into a view of one."""
    from mobius.synth.views import is_view, mutates

    if not mutates(node) or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    target = node.args[0]
    while target not in live:
        if not is_view(target) or not target.args or not isinstance(target.args[0], torch.fx.Node):
            return False
        target = target.args[0]
    return True
