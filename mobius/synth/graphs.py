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
from mobius.lora.peft_adapter import PeftAdapter
from mobius.package import ModelPackage
from mobius.report.weights import to_json as weights_json
from mobius.report.weights import weight_schemes
from mobius.source import Source
from mobius.synth.decompose import decompose_unlowered
from mobius.synth.fallbacks import announce
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
    from mobius.synth.fallbacks import LENGTH_BOUND, announce
    from mobius.synth.prepare import length_bound_fallback

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
    from mobius.synth.fallbacks import CARRIED_CACHE, FUSED_ATTENTION, Fallback, announce
    from mobius.synth.prepare import Prepared, _trace_carrying_cache, _trace_with_fallbacks

    carried = getattr(graph, "carried_cache_reason", None)
    if carried:  # the task knows the captured attention cannot serve: carry the cache
        traced = _trace_carrying_cache(arch, graph, dtype, graph.attention_implementations)
        taken = [Fallback(CARRIED_CACHE, carried, (FUSED_ATTENTION,))]
        part = Prepared(source, arch, graph, traced, use_cache=True, fallbacks=taken)
        announce(part.fallbacks)
        return part
    if graph.supports_cache:  # a causal decoder (a VLM's): the causal-LM chain
        part = _trace_with_fallbacks(source, arch, graph, dtype)
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
    from mobius.synth.prepare import Prepared

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


def analyze_graphs(prepared: PreparedGraphs) -> Any:
    """One Analysis for the whole package: each graph's modules under the graph's name
    (``encoder_model.model.encoder.layers.0``), only those that put something in that graph;
    each captured attention call is an ``Attention`` component of its module."""
    from dataclasses import replace

    from mobius.genai_vlm import genai_pipeline_missing
    from mobius.synth.analysis import Analysis, ModuleAnalysis, analyze
    from mobius.tasks.vlm_unsplit import image_path_left_out

    modules = [ModuleAnalysis("", "<model>")]
    unclaimed: list[str] = []
    for name, part in prepared.graphs.items():
        analysis = analyze(part)
        _report_captured(part.traced.program, {m.path: m for m in analysis.modules})
        for module in analysis.modules:
            if not (module.nodes or module.components or module.blocked_ops or module.declines):
                continue  # not in this graph (its parameters may still be traced inputs)
            path = f"{name}.{module.path}" if module.path else name
            cls = module.cls if module.path else "<graph>"
            modules.append(replace(module, path=path, cls=cls))
        unclaimed += [f"{name}.{p}" if p else name for p in part.unclaimed_attention]
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
    else:  # an encoder-decoder: the self cache is carried where attention went op by op
        decoder = prepared.graphs.get("decoder_model")
        op_by_op = decoder is not None and bool(decoder.unclaimed_attention)
        blocker = (
            "the decoder's attention is not captured as fused calls (see the attention gaps)"
            if op_by_op
            else None
        )
        traced_layers = (
            sum(1 for n in _decoder_inputs(prepared) if n.endswith(".decoder.key"))
            if op_by_op
            else 0
        )
    return Analysis(
        model_type=prepared.arch.model_type,
        task=prepared.task.name,
        kv_cache=True,
        cache_supported=True,
        unclaimed_attention=unclaimed,
        modules=modules,
        cache_blocker=blocker,
        traced_cache_layers=traced_layers,
        fallbacks=[f.to_dict() for p in prepared.graphs.values() for f in p.fallbacks],
        image_path_left_out=image_path_left_out(prepared.arch, prepared.task.name),
        genai_left_out=(
            genai_pipeline_missing(prepared.arch.model_type)
            if "vision_encoder" in prepared.graphs
            else None
        ),
    )


def _report_captured(program: torch.export.ExportedProgram, modules: dict[str, Any]) -> None:
    """Each ``mobius::seq2seq_attention`` node as an Attention component of its module, not a
    lowered op."""
    from lowering import op_name
    from mobius.synth.analysis import ComponentUse
    from mobius.synth.emit import module_of

    for node in program.graph.nodes:
        if node.target is not seq2seq_attention.OP:
            continue
        report = modules.get(module_of(node)[0])
        if report is None:
            continue
        q, k, v, bias, scaling, causal, padded, softcap = node.args
        qv, kv, vv = (a.meta["val"] for a in (q, k, v))
        name = op_name(node.target)
        report.lowered_ops[name] -= 1
        if report.lowered_ops[name] <= 0:
            del report.lowered_ops[name]
        report.claimed_nodes += 1
        report.components.append(
            ComponentUse(
                "seq2seq_attention",
                "Attention",
                {
                    "kind": "causal" if causal else "padded" if padded else "bidirectional",
                    "heads": int(qv.shape[1]),
                    "kv_heads": int(kv.shape[1]),
                    "head_dim": int(qv.shape[-1]),
                    "v_head_dim": int(vv.shape[-1]),
                    "scaling": scaling,
                    "bias": bias is not None and not seq2seq_attention.is_zeros(bias),
                    "softcap": softcap or None,
                },
            )
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
    from mobius.synth.decompose import _is_view, mutates

    if not mutates(node) or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    target = node.args[0]
    while target not in live:
        if not _is_view(target) or not target.args or not isinstance(target.args[0], torch.fx.Node):
            return False
        target = target.args[0]
    return True


def build_graphs(
    prepared: PreparedGraphs,
    *,
    src: str,
    dtype: str,
    weights: bool,
    task: str | None,
    strict: bool = False,
    adapter: PeftAdapter | None = None,
) -> ModelPackage:
    """Emit and bind every graph; one ModelPackage with ``<graph>.onnx`` for each. With
    ``strict``, any graph's fallback is refused (``fallbacks.refuse``); ``adapter`` is folded
    into every graph's weights (``mobius.lora.fold``)."""
    from mobius.report import ExplainReport
    from mobius.synth import fallbacks
    from mobius.synth.build import _blocked_message, lora_fold
    from mobius.synth.emit import emit
    from mobius.synth.token_loop import loop_over_tokens
    from mobius.weights import Checkpoint

    if strict:
        fallbacks.refuse([f for part in prepared.graphs.values() for f in part.fallbacks])

    report = ExplainReport.from_analysis(analyze_graphs(prepared), source=str(src))
    if report.summary.unsupported_ops:
        raise UnsupportedError(_blocked_message(report, src, task))
    checkpoint = Checkpoint(prepared.source.tensors) if weights else None
    models, unused, folding = {}, None, None
    for name, part in prepared.graphs.items():
        traced = part.traced
        binder = traced.binder(checkpoint)
        if folding is not None:  # one fold for the build: a target may be in any graph
            folding.attach(binder)
        else:
            folding = lora_fold(adapter, prepared.source, binder)
        captured_cache = part.use_cache and not traced.cache_in_graph
        model = emit(
            traced, binder, name=f"{prepared.arch.model_type}_{name}", use_cache=captured_cache
        )
        if traced.loop_inputs:
            invariant = getattr(part.task, "loop_invariant", lambda _: set())(traced.inputs)
            model = loop_over_tokens(model, traced.loop_inputs, traced.inputs, invariant)
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
    if folding is not None:
        folding.check_used()
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
        **({"lora": folding.to_json()} if folding is not None else {}),
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
    stored = {s.name: s for m in models.values() for s in weight_schemes(m)}  # shared: once
    report.weights = manifest["weights"] = weights_json(list(stored.values()))
    texts = {
        "mobius.json": json.dumps(manifest, indent=2),
        "explain.json": report.to_json(),
        **runtime,
    }
    extra = [prepared.source.config_path, *prepared.source.extra_files()]
    return ModelPackage(model=None, models=models, extra_files=extra, texts=texts)
