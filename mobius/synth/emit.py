"""Walk the traced FX graph once, in order, and emit ONNX through patterns and the lowering table."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable

import onnx_ir as ir
import onnxscript
import torch
import torch.fx
from torch.export.graph_signature import InputKind, OutputKind

from lowering import (
    LoweringContext,
    find_complex_lowering,
    find_lowering,
    involves_complex,
    node_lowering,
    onnx_dtype,
    op_name,
)
from mobius import failures
from mobius.errors import MobiusError, UnsupportedError
from mobius.synth.cleanup import tidy
from mobius.synth.decompose import functional_form
from mobius.synth.op_builder import GraphBuilder
from mobius.synth.trace import WRAPPER_PREFIX, TracedModel
from patterns import attention as attention_pattern
from patterns import match_all
from patterns import sdpa as sdpa_pattern
from patterns.base import Decline, Region, module_of
from patterns.registry import find_emitter

OPSET = 23
log = logging.getLogger("mobius")

# (kind, state-dict name, traced value, persistent) -> initializer or graph input
InitializerFactory = Callable[[InputKind, str, torch.Tensor, bool], ir.Value]


def strip_prefix(name: str) -> str:
    return name[len(WRAPPER_PREFIX) :] if name.startswith(WRAPPER_PREFIX) else name


def handler(target: object) -> Callable | None:
    """What emits a node: a pattern's emitter for captured ops, else the lowering table."""
    return find_emitter(target) or find_lowering(target)


def node_handler(node: torch.fx.Node) -> Callable | None:
    """``handler`` for a node, including safe in-place ops (lowered functionally, input rebound).

    Nodes that read or make complex tensors have their own table (``lowering/complex_ops.py``).
    """
    if involves_complex(node):
        return find_emitter(node.target) or find_complex_lowering(node.target)
    found = find_emitter(node.target) or node_lowering(node)
    if found is not None:
        return found
    functional = functional_form(node)
    if functional is None:
        return None
    lower = find_lowering(functional)

    def in_place(ctx: LoweringContext, n: torch.fx.Node):
        result = lower(ctx, n)
        ctx.env[n.args[0]] = result  # later readers of the written tensor see the new value
        return result

    return in_place


def blocked_op_name(node: torch.fx.Node) -> str:
    """How a node without a handler is reported: its op, marked when its values are complex."""
    name = op_name(node.target)
    return f"{name}:complex" if involves_complex(node) else name


def regions(program: torch.export.ExportedProgram) -> list[Region]:
    """The traced nodes grouped by the innermost module instance that produced them."""
    by_path: dict[str, Region] = {}
    for node in program.graph.nodes:
        if node.op == "call_function":
            path, cls = module_of(node)
            by_path.setdefault(path, Region(path, cls, [])).nodes.append(node)
    return list(by_path.values())


def unsupported_ops(
    program: torch.export.ExportedProgram, owner: dict[torch.fx.Node, object]
) -> dict[str, set[str]]:
    """aten ops with no lowering outside the claimed nodes (``owner``), with the modules using them."""
    missing: dict[str, set[str]] = defaultdict(set)
    for node in program.graph.nodes:
        if node.op == "call_function" and node not in owner and node_handler(node) is None:
            missing[blocked_op_name(node)].add(module_of(node)[0] or "<model>")
    return dict(missing)


def unclaimed_attention(traced: TracedModel) -> list[str]:
    """Attention modules (by class name, innermost) that ran but whose attention nobody captured."""
    return _attention_sites(traced)[0]


def bidirectional_attention(traced: TracedModel) -> bool:
    """Every uncaptured attention module was declined for attending both ways (an encoder's
    padding-only mask): the model is not causal, so a KV cache cannot reproduce it."""
    unclaimed, declines = _attention_sites(traced)
    bidirectional = [d.module for d in declines if d.reason in sdpa_pattern.BIDIRECTIONAL]
    return bool(unclaimed) and all(
        any(_inside(m, path) for m in bidirectional) for path in unclaimed
    )


def attention_captured(traced: TracedModel) -> bool:
    """Whether the graph holds attention that the emitted graph gives a KV cache: a captured
    call, or a pattern's ``Attention`` component (``patterns/sdpa.py``)."""
    program = traced.program
    target = torch.ops.mobius.attention.default
    if any(n.op == "call_function" and n.target is target for n in program.graph.nodes):
        return True
    _, claims, _ = match_all(program.graph, regions(program), traced.match_context)
    return any(c.component == "Attention" for c in claims)


def _inside(path: str, module: str) -> bool:
    """``path`` is ``module`` or one of its submodules."""
    return path == module or path.startswith(module + ".")


def _attention_sites(traced: TracedModel) -> tuple[list[str], list[Decline]]:
    """The uncaptured attention modules, and every decline the patterns gave (one matching run)."""
    program = traced.program
    claimed = {
        module_of(n)[0]
        for n in program.graph.nodes
        if n.op == "call_function" and n.target is torch.ops.mobius.attention.default
    }
    graph_regions = regions(program)
    _, claims, declines = match_all(program.graph, graph_regions, traced.match_context)
    claimed |= {c.module for c in claims if c.component == "Attention"}
    # modules the traced forward never ran (a decoder-only model's cross-attention, a vision
    # tower in a text-only trace) need no cache and must not cost the others theirs
    ran = {r.path for r in graph_regions if r.path}
    names = [
        p for p, cls in traced.module_classes.items() if p and "Attention" in cls.rsplit(".", 1)[-1]
    ]
    leaves = [p for p in names if not any(o.startswith(p + ".") for o in names)]

    def is_claimed(path: str) -> bool:
        return any(_inside(c, path) or _inside(path, c) for c in claimed)

    def ran_in_trace(path: str) -> bool:
        return any(_inside(r, path) for r in ran)

    unclaimed = [p for p in leaves if ran_in_trace(p) and not is_claimed(p)]
    return unclaimed, declines


def emit(
    traced: TracedModel,
    make_initializer: InitializerFactory,
    *,
    name: str = "model",
    use_cache: bool = False,
) -> ir.Model:
    """Build the ONNX model. Raises UnsupportedError naming each op without a lowering.

    With ``use_cache`` every captured attention reads ``past_key_values.{i}.key/value`` and returns
    ``present.{i}.key/value``; the traced ``attention_mask`` input then spans past and new tokens.
    """
    program = traced.program
    owner, claims, declines = match_all(program.graph, regions(program), traced.match_context)
    missing = unsupported_ops(program, owner)
    if missing:
        detail = "; ".join(
            f"{op} (in {', '.join(sorted(mods)[:3])})" for op, mods in sorted(missing.items())
        )
        raise UnsupportedError(
            f"no lowering for: {detail}; run 'mobius explain' for the full report"
        )

    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name=name)
    builder = GraphBuilder(graph)
    ctx = LoweringContext(builder.op)
    ctx.state.update(use_cache=use_cache, masks={}, cache=[])
    contract_inputs, weight_inputs = _bind_placeholders(ctx, builder, traced, make_initializer)

    for node in program.graph.nodes:
        if node.op == "call_function":
            claim = owner.get(node)
            if claim is not None and node is not claim.anchor:
                continue  # replaced by the claim's component, emitted at its anchor
            path, cls = module_of(node)
            builder.push_module(path, cls)
            try:
                result = claim.emit(ctx) if claim is not None else node_handler(node)(ctx, node)
            except Exception as exc:
                failure = _lowering_failure(exc, op_name(node.target), path)
                if failure is exc:
                    raise
                raise failure from exc
            finally:
                builder.pop_module()
            ctx.env[node] = result
            _annotate(result, node)
        elif node.op == "output":
            _emit_outputs(ctx, builder, _user_outputs(program, node), traced.outputs)
    graph.inputs.clear()
    graph.inputs.extend(contract_inputs + attention_pattern.cache_inputs(ctx.state) + weight_inputs)
    for out_name, value in attention_pattern.cache_outputs(ctx.state):
        if value.is_graph_input() or value.is_graph_output():
            value = builder.op.Identity(value)
        builder.add_output(value, out_name)
    model = tidy(ir.Model(graph, ir_version=10, producer_name="mobius"))
    record_weight_sources(model)
    model.meta["mobius.claims"] = claims
    model.meta["mobius.declines"] = declines
    return model


def _bind_placeholders(
    ctx: LoweringContext,
    builder: onnxscript.GraphBuilder,
    traced: TracedModel,
    make_initializer: InitializerFactory,
) -> tuple[list[ir.Value], list[ir.Value]]:
    program = traced.program
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user_specs = iter(traced.inputs)
    contract: list[ir.Value] = []
    weight_inputs: list[
        ir.Value
    ] = []  # graph-only builds: parameters as inputs, after the contract's
    graph = builder.graph
    for node, spec in zip(placeholders, program.graph_signature.input_specs, strict=True):
        val = node.meta.get("val")
        if spec.kind == InputKind.USER_INPUT:
            tspec = next(user_specs)
            dims = list(tspec.dims)
            if tspec.name == "attention_mask" and ctx.state["use_cache"]:
                dims[1] = "total_sequence_length"
            value = builder.input(
                tspec.name, onnx_dtype(tspec.dtype or traced.dtype), ir.Shape(dims)
            )
            contract.append(value)
            ctx.env[node] = value
            if tspec.name == traced.padding_input:
                ctx.state["attention_mask"] = value
        elif spec.kind == InputKind.CONSTANT_TENSOR and not node.users:
            continue  # made in forward and read by nothing left (LLaVA-NeXT's feature lengths)
        else:
            persistent = (
                bool(spec.persistent)
                if spec.kind == InputKind.BUFFER
                else spec.kind == InputKind.PARAMETER
            )
            value = make_initializer(spec.kind, strip_prefix(spec.target), val, persistent)
            if value.const_value is None and value not in weight_inputs:
                weight_inputs.append(value)
            elif value.const_value is not None and not value.is_initializer():
                graph.register_initializer(value)
            ctx.env[node] = value
    if ctx.state["use_cache"] and "attention_mask" in ctx.state:
        # the traced graph sees the mask of the new tokens only: its last sequence_length columns
        ids = next(  # a VLM's decoder takes inputs_embeds [batch, sequence, hidden]
            n
            for n, s in zip(placeholders, traced.inputs, strict=False)
            if s.name in ("input_ids", "inputs_embeds")
        )
        mask_node = next(n for n in placeholders if ctx.env.get(n) is ctx.state["attention_mask"])
        seq = ctx.op.Shape(ctx.env[ids], start=1, end=2)
        ctx.env[mask_node] = ctx.op.Slice(
            ctx.state["attention_mask"], ctx.op.Neg(seq), ctx.ints([2**63 - 1]), ctx.ints([1])
        )
    return contract, weight_inputs


def record_weight_sources(model: ir.Model) -> None:
    """Model metadata ``mobius.weight_sources``: initializer -> checkpoint key(s), where they differ.

    Kept at model level because tensor metadata does not survive the move to external data.
    """
    sources = {}
    for name, value in model.graph.initializers.items():
        meta = value.const_value.metadata_props if value.const_value is not None else {}
        source = meta.get("mobius.source_key") or meta.get("mobius.source_keys")
        if source and source != name:
            sources[name] = source
    if sources:
        model.metadata_props["mobius.weight_sources"] = json.dumps(sources, sort_keys=True)


def _annotate(result: object, node: torch.fx.Node) -> None:
    """Record the traced dtype on single tensor outputs (shape inference fills in the rest)."""
    val = node.meta.get("val")
    if isinstance(result, ir.Value) and isinstance(val, torch.Tensor) and result.type is None:
        result.dtype = onnx_dtype(val.dtype.to_real())  # complex: carried as real pairs


def _user_outputs(program: torch.export.ExportedProgram, node: torch.fx.Node) -> list:
    """The model's own outputs, without the buffer updates forward() made (e.g. longrope's inv_freq)."""
    results = node.args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    kinds = [spec.kind for spec in program.graph_signature.output_specs]
    return [r for r, kind in zip(results, kinds, strict=True) if kind == OutputKind.USER_OUTPUT]


def _emit_outputs(
    ctx: LoweringContext, builder: onnxscript.GraphBuilder, results: list, names: list[str]
) -> None:
    if len(results) != len(names):
        raise UnsupportedError(
            f"the traced model returns {len(results)} outputs, the task expects {len(names)}"
        )
    for out_name, arg in zip(names, results, strict=True):
        value = ctx.value(arg)
        if value.is_graph_input() or value.is_initializer() or value.is_graph_output():
            value = builder.op.Identity(value)
        val = ctx.val(arg)
        builder.add_output(value, out_name)
        if isinstance(val, torch.Tensor):
            value.dtype = onnx_dtype(val.dtype)
            value.shape = ir.Shape([d if isinstance(d, int) else None for d in val.shape])


# what patterns and lowerings raise on purpose for a case they do not handle
_DELIBERATE = (UnsupportedError, NotImplementedError, ValueError)


def _lowering_failure(exc: Exception, op: str, path: str) -> Exception:
    """A deliberate refusal as UnsupportedError (exit 2); anything else is a bug of ours."""
    failures.raise_if_fatal(exc)
    where = f" in {path}" if path else ""
    if isinstance(exc, _DELIBERATE):
        return UnsupportedError(f"lowering {op}{where} failed: {exc}")
    if isinstance(exc, MobiusError):
        return exc
    return failures.internal_error(exc, f"lowering {op}{where}")
