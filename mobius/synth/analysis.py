"""What became of every module of a traced model: components, lowered ops, blocked ops, declines.

This is the data behind ``mobius explain``; it needs the traced graph only, no weights.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.export.graph_signature import InputKind

from lowering import op_name
from mobius.config import read
from mobius.synth.emit import blocked_op_name, module_of, node_handler, regions, strip_prefix
from mobius.synth.prepare import Prepared
from mobius.tasks.vlm_unsplit import image_path_left_out
from patterns import match_all, rotary
from patterns.base import NO_OPS, Claim, is_op

BOOKKEEPING = {"aten._assert_tensor_metadata.default", "aten.sym_size.int", "_operator.getitem"}


@dataclass
class ComponentUse:
    """One component a pattern emitted inside a module, with the attributes it extracted."""

    pattern: str
    component: str
    attributes: dict[str, Any]


@dataclass
class ModuleAnalysis:
    """One module instance of the HF model."""

    path: str
    cls: str
    components: list[ComponentUse] = field(default_factory=list)
    lowered_ops: Counter = field(default_factory=Counter)  # aten op -> count, outside components
    blocked_ops: Counter = field(default_factory=Counter)  # aten op -> count, with no lowering
    declines: list[tuple[str, str]] = field(default_factory=list)  # (pattern, reason)
    parameters: int = 0  # elements of the parameters this module owns directly
    claimed_parameters: int = 0  # of those, elements read only by components
    nodes: int = 0
    claimed_nodes: int = 0


@dataclass
class Analysis:
    """The whole model: per-module results plus the facts the summary needs."""

    model_type: str
    task: str
    kv_cache: bool
    cache_supported: bool  # the task's contract has a KV cache at all
    unclaimed_attention: list[str]
    modules: list[ModuleAnalysis]
    cache_blocker: str | None = None  # why captured attention could not carry the cache
    traced_cache_layers: int = 0  # layers whose state the trace itself carries (synth/state.py)
    token_loop: bool = False  # traced for one token, run over the sequence in an ONNX Loop
    fallbacks: list[dict[str, object]] = field(default_factory=list)  # Fallback.to_dict()s
    # a vision-language model converted without its image path: why (tasks/vlm_unsplit.py)
    image_path_left_out: str | None = None
    genai_left_out: str | None = None  # a three-graph VLM onnxruntime-genai has no pipeline for

    @property
    def blocked(self) -> dict[str, list[str]]:
        """aten op -> modules that use it, for ops with no lowering."""
        out: dict[str, list[str]] = {}
        for module in self.modules:
            for op in module.blocked_ops:
                out.setdefault(op, []).append(module.path or "<model>")
        return out


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
        image_path_left_out=image_path_left_out(prepared.arch, prepared.task.name),
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
