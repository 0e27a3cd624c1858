"""Tasks made of several graphs (encoder–decoder): each graph goes through the same trace ->
match -> emit -> bind path as a one-graph task, and the package holds them side by side.

Each graph binds its own subset of the checkpoint; a tensor both graphs read (T5's shared
embedding) is written into each graph's data file.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import torch

from mobius.config import ArchitectureConfig
from mobius.errors import UnsupportedError
from mobius.package import ModelPackage
from mobius.source import Source
from mobius.synth.decompose import decompose_unlowered
from mobius.synth.trace import trace
from mobius.tasks import Task

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
    """Trace every graph of ``task`` on meta, with transformers' own attention."""
    from mobius.synth.fallbacks import CARRIED_CACHE, FUSED_ATTENTION, Fallback, announce
    from mobius.synth.prepare import Prepared, _trace_carrying_cache, _trace_with_fallbacks

    graphs = {}
    for graph in task.graphs:
        if hasattr(graph, "for_config"):  # the graph's settings depend on the model (vlm.py)
            graph = graph.for_config(arch)
        log.info("tracing %s's %s", arch.model_type, graph.name)
        carried = getattr(graph, "carried_cache_reason", None)
        if carried:  # the task knows the captured attention cannot serve: carry the cache
            traced = _trace_carrying_cache(arch, graph, dtype, graph.attention_implementations)
            taken = [Fallback(CARRIED_CACHE, carried, (FUSED_ATTENTION,))]
            part = Prepared(source, arch, graph, traced, use_cache=True, fallbacks=taken)
            announce(part.fallbacks)
        elif graph.supports_cache:  # a causal decoder (a VLM's): the causal-LM chain
            part = _trace_with_fallbacks(source, arch, graph, dtype)
            announce(part.fallbacks)
        else:
            part = Prepared(source, arch, graph, trace(arch, graph, dtype), use_cache=False)
        _drop_dead_code(part.traced.program)
        part.traced.program = decompose_unlowered(part.traced.program)
        graphs[graph.name] = part
    return PreparedGraphs(source, arch, task, graphs)


def analyze_graphs(prepared: PreparedGraphs) -> Any:
    """One Analysis for the whole package: each graph's modules under the graph's name
    (``encoder_model.model.encoder.layers.0``), only those that put something in that graph."""
    from dataclasses import replace

    from mobius.synth.analysis import Analysis, ModuleAnalysis, analyze

    modules = [ModuleAnalysis("", "<model>")]
    for name, part in prepared.graphs.items():
        for module in analyze(part).modules:
            if not (module.nodes or module.components or module.blocked_ops):
                continue  # not in this graph (its parameters may still be traced inputs)
            path = f"{name}.{module.path}" if module.path else name
            cls = module.cls if module.path else "<graph>"
            modules.append(replace(module, path=path, cls=cls))
    blocker = (
        "an encoder-decoder's decoder graph carries its self-attention cache and takes the "
        "encoder graph's cross-attention keys and values through transformers' "
        "EncoderDecoderCache"
    )
    traced_layers = sum(1 for n in _decoder_inputs(prepared) if n.endswith(".decoder.key"))
    causal = [p for p in prepared.graphs.values() if p.task.supports_cache]
    if causal:  # a VLM's decoder: captured attention, or the cache carried (and why)
        blocker = "; ".join(f.reason for p in causal for f in p.fallbacks) or None
        traced_layers = sum(
            1
            for p in causal
            if p.traced.cache_in_graph
            for s in p.traced.inputs
            if s.name.startswith("past_key_values.") and s.name.endswith(".key")
        )
    return Analysis(
        model_type=prepared.arch.model_type,
        task=prepared.task.name,
        kv_cache=True,
        cache_supported=True,
        unclaimed_attention=[],
        modules=modules,
        cache_blocker=blocker,
        traced_cache_layers=traced_layers,
    )


def _decoder_inputs(prepared: PreparedGraphs) -> list[str]:
    return [s.name for part in prepared.graphs.values() for s in part.traced.inputs]


def _drop_dead_code(program: torch.export.ExportedProgram) -> None:
    """Remove what no output reads (the encoder graph's placeholder decoder call). The graph's
    own ``eliminate_dead_code`` keeps it: shape assertions on dead tensors count as side effects.
    An assertion on live tensors stays."""
    graph = program.graph
    live: set[torch.fx.Node] = set()
    stack = [graph.output_node()]
    while stack:
        node = stack.pop()
        if node not in live:
            live.add(node)
            stack.extend(node.all_input_nodes)
    for node in reversed(list(graph.nodes)):
        if node.op != "call_function" or node in live or node.users:
            continue
        if node.all_input_nodes and all(i in live for i in node.all_input_nodes):
            continue  # an assertion about a live value
        graph.erase_node(node)
    program.graph_module.recompile()


def build_graphs(
    prepared: PreparedGraphs, *, src: str, dtype: str, weights: bool, task: str | None
) -> ModelPackage:
    """Emit and bind every graph; one ModelPackage with ``<graph>.onnx`` for each."""
    from mobius.report import ExplainReport
    from mobius.synth.build import _blocked_message
    from mobius.synth.emit import emit
    from mobius.synth.token_loop import loop_over_tokens
    from mobius.weights import Checkpoint

    report = ExplainReport.from_analysis(analyze_graphs(prepared), source=str(src))
    if report.summary.unsupported_ops:
        raise UnsupportedError(_blocked_message(report, src, task))
    checkpoint = Checkpoint(prepared.source.tensors) if weights else None
    models, unused = {}, None
    for name, part in prepared.graphs.items():
        traced = part.traced
        binder = traced.binder(checkpoint)
        captured_cache = part.use_cache and not traced.cache_in_graph
        model = emit(
            traced, binder, name=f"{prepared.arch.model_type}_{name}", use_cache=captured_cache
        )
        if traced.loop_inputs:
            model = loop_over_tokens(model, traced.loop_inputs, traced.inputs)
        model.metadata_props.update(
            {
                "mobius.model_type": prepared.arch.model_type,
                "mobius.task": prepared.task.name,
                "mobius.graph": name,
                "mobius.dtype": dtype,
            }
        )
        left = set(binder.unused_keys())
        unused = left if unused is None else unused & left
        models[name] = model
    if unused:
        shown = ", ".join(sorted(unused)[:5])
        log.warning("the checkpoint has %d tensors no graph uses: %s", len(unused), shown)
    manifest = {
        "model_type": prepared.arch.model_type,
        "task": prepared.task.name,
        "dtype": dtype,
        "kv_cache": True,
        "graphs": {
            f"{name}.onnx": {
                "inputs": [v.name for v in m.graph.inputs],
                "outputs": [v.name for v in m.graph.outputs],
            }
            for name, m in models.items()
        },
        **prepared.task.manifest(prepared.arch),
    }
    fallen = [f.to_dict() for part in prepared.graphs.values() for f in part.fallbacks]
    if fallen:
        manifest["fallbacks"] = fallen
    runtime, note = {}, None
    runtime_files = getattr(prepared.task, "runtime_files", None)  # genai_config.json (VLMs)
    if runtime_files is not None:
        runtime, note = runtime_files(models, prepared.arch, prepared.source.directory)
    if note:
        log.info("no genai_config.json: %s", note)
        manifest["genai"] = f"no genai_config.json: {note}"
    texts = {
        "mobius.json": json.dumps(manifest, indent=2),
        "explain.json": report.to_json(),
        **runtime,
    }
    extra = [prepared.source.config_path, *prepared.source.extra_files()]
    return ModelPackage(model=None, models=models, extra_files=extra, texts=texts)
