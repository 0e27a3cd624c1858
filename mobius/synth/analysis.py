"""What became of every module of a traced model: components, lowered ops, blocked ops, declines;
for a task of several graphs, each graph's modules under the graph's name (``analyze_graphs``).

This is the data behind ``mobius explain`` (``mobius.findings``); it needs the traced graph only,
no weights.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.fx
from torch.export.graph_signature import InputKind

from lowering import op_name
from mobius.findings import Analysis, ComponentUse, ModuleAnalysis
from mobius.runtime.genai_vlm import genai_pipeline_missing
from mobius.sources.config import read
from mobius.synth.chain import Prepared
from mobius.synth.emit import blocked_op_name, module_of, node_handler, regions, strip_prefix
from mobius.synth.graphs import PreparedGraphs
from mobius.tasks.vlm_unsplit import image_path_left_out, image_path_task
from patterns import match_all, rotary, seq2seq_attention
from patterns.base import NO_OPS, Claim, is_op

BOOKKEEPING = {"aten._assert_tensor_metadata.default", "aten.sym_size.int", "_operator.getitem"}


def _attention_use(node: torch.fx.Node) -> ComponentUse:
    q, k, v, layer, scaling, causal, window, softcap = node.args
    qv, kv, vv = (a.meta["val"] for a in (q, k, v))
    return ComponentUse(
        "attention",
        "Attention",
        {
            "layer": layer if layer >= 0 else None,  # -1: no layer_idx (no cache needed)
            "heads": int(qv.shape[1]),
            "kv_heads": int(kv.shape[1]),
            "head_dim": int(qv.shape[-1]),
            "v_head_dim": int(vv.shape[-1]),
            "scaling": scaling,
            "causal": causal,
            "window": window or None,
            "softcap": softcap or None,
        },
    )


def _claim_use(claim: Claim, rope: dict[str, Any]) -> ComponentUse:
    """A claim's component; a claim that swallowed a captured attention call reports its facts."""
    attributes = dict(claim.attributes)
    for node in claim.nodes:
        if node.target is torch.ops.mobius.attention.default:
            attributes = {**_attention_use(node).attributes, **attributes}
    if claim.pattern != "rotary" and "rotary_dim" not in attributes:
        inner = (rotary.match(n) for n in claim.nodes if n.op == "call_function")
        found = next((r for r in inner if isinstance(r, Claim) and r.nodes <= claim.nodes), None)
        if found is not None:  # a rotation this claim swallowed (the packed attention block)
            attributes.update({k: v for k, v in found.attributes.items() if k not in attributes})
    if "rotary_dim" in attributes:
        attributes.update(rope)
    return ComponentUse(claim.pattern, claim.component, attributes)


def analyze(prepared: Prepared) -> Analysis:
    """Match patterns on the traced graph and sort every node into a module's report."""
    program = prepared.traced.program
    graph_regions = regions(program)
    owner, claims, declines = match_all(program.graph, graph_regions, prepared.traced.match_context)
    modules = {
        p: ModuleAnalysis(p, c.rsplit(".", 1)[-1])
        for p, c in prepared.traced.module_classes.items()
    }
    modules.setdefault("", ModuleAnalysis("", "<model>"))

    def module(path: str) -> ModuleAnalysis:
        return modules.setdefault(path, ModuleAnalysis(path, "?"))

    rope = _rope_attributes(prepared.arch.hf_config)
    for claim in claims:
        module(claim.module).components.append(_claim_use(claim, rope))
    for decline in declines:
        module(decline.module).declines.append((decline.pattern, decline.reason))
    for node in program.graph.nodes:
        if node.op != "call_function" or is_op(node, *NO_OPS):
            continue
        report = module(module_of(node)[0])
        report.nodes += 1
        if node in owner:
            report.claimed_nodes += 1
        elif node.target is torch.ops.mobius.attention.default:
            report.claimed_nodes += 1
            report.components.append(_attention_use(node))
        elif node_handler(node) is None:
            report.blocked_ops[blocked_op_name(node)] += 1
        elif op_name(node.target) not in BOOKKEEPING:
            report.lowered_ops[op_name(node.target)] += 1
    for node, spec in zip(
        (n for n in program.graph.nodes if n.op == "placeholder"),
        program.graph_signature.input_specs,
        strict=True,
    ):
        if spec.kind == InputKind.PARAMETER:
            owned = module(strip_prefix(spec.target).rpartition(".")[0])
            size = int(node.meta["val"].numel())
            owned.parameters += size
            if _claimed_only(node, owner):
                owned.claimed_parameters += size
    for path in prepared.unclaimed_attention:
        reason = prepared.attention_reasons.get(
            path, "this attention does not call transformers' AttentionInterface"
        )
        module(path).declines.append(("attention", reason))
    return Analysis(
        model_type=prepared.arch.model_type,
        task=prepared.task.name,
        kv_cache=prepared.use_cache,
        cache_supported=prepared.task.supports_cache,
        unclaimed_attention=list(prepared.unclaimed_attention),
        cache_blocker=prepared.cache_blocker,
        traced_cache_layers=_traced_cache_layers(prepared),
        token_loop=bool(prepared.traced.loop_inputs),
        fallbacks=[f.to_dict() for f in prepared.fallbacks],
        modules=[modules[p] for p in sorted(modules, key=_tree_order)],
        image_path_left_out=image_path_left_out(prepared.arch, image_path_task(prepared.task)),
    )


def _traced_cache_layers(prepared: Prepared) -> int:
    if not (prepared.use_cache and prepared.traced.cache_in_graph):
        return 0
    return len({s.name.split(".")[1] for s in prepared.traced.inputs if "." in s.name})


def _claimed_only(node: torch.fx.Node, owner: dict) -> bool:
    """Every op that reads this parameter belongs to a component."""
    users = [u for u in node.users if u.op == "call_function" and not is_op(u, *NO_OPS)]
    return bool(users) and all(
        u in owner or u.target is torch.ops.mobius.attention.default for u in users
    )


def _rope_attributes(hf_config: Any) -> dict[str, Any]:
    """Rope type and theta from the config (the rotary tables are computed from them).

    Models with one table per layer type (gemma3) get a mapping layer type -> value.
    """
    params = read(hf_config, "rope_parameters") or read(hf_config, "rope_scaling")
    if isinstance(params, tuple):  # varies by layer (per_layer_config): one entry per layer
        params = {f"layer {i}": p for i, p in enumerate(params) if isinstance(p, dict)}
    params = params if isinstance(params, dict) else {}
    if params and all(isinstance(v, dict) for v in params.values()):
        return {
            "rope_type": {k: v.get("rope_type", "default") for k, v in params.items()},
            "rope_theta": {k: v.get("rope_theta") for k, v in params.items()},
        }
    theta = params.get("rope_theta", read(hf_config, "rope_theta"))
    out = {"rope_type": params.get("rope_type", "default"), "rope_theta": theta}
    return {k: v for k, v in out.items() if v is not None}


def _tree_order(path: str) -> list:
    return [int(p) if p.isdigit() else p for p in path.split(".")] if path else []


def analyze_graphs(prepared: PreparedGraphs) -> Any:
    """One Analysis for the whole package: each graph's modules under the graph's name
    (``encoder_model.model.encoder.layers.0``), only those that put something in that graph;
    each captured attention call is an ``Attention`` component of its module."""
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
        image_path_left_out=image_path_left_out(prepared.arch, image_path_task(prepared.task)),
        genai_left_out=(
            genai_pipeline_missing(prepared.arch.model_type)
            if "vision_encoder" in prepared.graphs
            else None
        ),
    )


def _report_captured(program: torch.export.ExportedProgram, modules: dict[str, Any]) -> None:
    """Each ``mobius::seq2seq_attention`` node as an Attention component of its module, not a
    lowered op."""
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
