"""Walk the traced FX graph once, in order, and emit ONNX through the lowering table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import onnx_ir as ir
import onnxscript
import torch
import torch.fx
from torch.export.graph_signature import InputKind

from lowering import LoweringContext, find_lowering, onnx_dtype, op_name
from mobius.errors import UnsupportedError
from mobius.synth.trace import WRAPPER_PREFIX, TracedModel

OPSET = 23

# (kind, state-dict name, traced value, persistent) -> initializer or graph input
InitializerFactory = Callable[[InputKind, str, torch.Tensor, bool], ir.Value]


def strip_prefix(name: str) -> str:
    return name[len(WRAPPER_PREFIX) :] if name.startswith(WRAPPER_PREFIX) else name


def module_of(node: torch.fx.Node) -> tuple[str, str]:
    """The innermost HF module (path, class name) that produced ``node``; ('', '') at top level."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, cls in reversed(list(stack.values())):
        if isinstance(path, str) and path.startswith(WRAPPER_PREFIX):
            return strip_prefix(path), cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return "", ""


def unsupported_ops(program: torch.export.ExportedProgram) -> dict[str, set[str]]:
    """aten ops with no lowering, each with the modules that use them."""
    missing: dict[str, set[str]] = defaultdict(set)
    for node in program.graph.nodes:
        if node.op == "call_function" and find_lowering(node.target) is None:
            missing[op_name(node.target)].add(module_of(node)[0] or "<model>")
    return dict(missing)


def emit(traced: TracedModel, make_initializer: InitializerFactory, *, name: str = "model") -> ir.Model:
    """Build the ONNX model. Raises UnsupportedError naming each op without a lowering."""
    program = traced.program
    missing = unsupported_ops(program)
    if missing:
        detail = "; ".join(f"{op} (in {', '.join(sorted(mods)[:3])})" for op, mods in sorted(missing.items()))
        raise UnsupportedError(f"no lowering for: {detail}; run 'mobius explain' for the full report")

    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name=name)
    builder = onnxscript.GraphBuilder(graph)
    ctx = LoweringContext(builder.op)
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user_inputs = iter(traced.inputs)
    weight_inputs: list[ir.Value] = []  # graph-only builds: parameters as inputs, after the contract's
    for node, spec in zip(placeholders, program.graph_signature.input_specs, strict=True):
        val = node.meta.get("val")
        if spec.kind == InputKind.USER_INPUT:
            tspec = next(user_inputs)
            dtype = tspec.dtype or traced.dtype
            ctx.env[node] = builder.input(tspec.name, onnx_dtype(dtype), ir.Shape(list(tspec.dims)))
        else:
            persistent = bool(spec.persistent) if spec.kind == InputKind.BUFFER else spec.kind == InputKind.PARAMETER
            value = make_initializer(spec.kind, strip_prefix(spec.target), val, persistent)
            if value.const_value is None and value not in weight_inputs:
                weight_inputs.append(value)
            elif value.const_value is not None and not value.is_initializer():
                graph.register_initializer(value)
            ctx.env[node] = value

    graph.inputs.extend(weight_inputs)
    for node in program.graph.nodes:
        if node.op == "call_function":
            path, cls = module_of(node)
            builder.push_module(path, cls)
            try:
                result = find_lowering(node.target)(ctx, node)
            except Exception as exc:
                where = f" in {path}" if path else ""
                raise UnsupportedError(f"lowering {op_name(node.target)}{where} failed: {exc}") from exc
            finally:
                builder.pop_module()
            ctx.env[node] = result
            _annotate(result, node)
        elif node.op == "output":
            _emit_outputs(ctx, builder, node, traced.outputs)
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    ir.passes.common.RemoveUnusedNodesPass()(model)
    return model


def _annotate(result: object, node: torch.fx.Node) -> None:
    """Record the traced dtype on single tensor outputs (shape inference fills in the rest)."""
    val = node.meta.get("val")
    if isinstance(result, ir.Value) and isinstance(val, torch.Tensor) and result.type is None:
        result.dtype = onnx_dtype(val.dtype)


def _emit_outputs(ctx: LoweringContext, builder: onnxscript.GraphBuilder, node: torch.fx.Node, names: list[str]) -> None:
    results = node.args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    if len(results) != len(names):
        raise UnsupportedError(f"the traced model returns {len(results)} outputs, the task expects {len(names)}")
    for out_name, arg in zip(names, results, strict=True):
        value = ctx.value(arg)
        if value.is_graph_input() or value.is_initializer() or value.is_graph_output():
            value = builder.op.Identity(value)
        val = ctx.val(arg)
        builder.add_output(value, out_name)
        if isinstance(val, torch.Tensor):
            value.dtype = onnx_dtype(val.dtype)
            value.shape = ir.Shape([d if isinstance(d, int) else None for d in val.shape])
