"""MoE routing + experts -> onnxruntime's ``com.microsoft`` ``MoE`` (one kernel per block).

Anchored on a captured ``mobius::experts`` node (patterns/experts.py), the pattern reads the router
that made its ``top_k_index`` and ``top_k_weights`` from the aten graph:

- ``softmax_topk``: ``topk(softmax(logits))``, weights renormalised by their sum or not (Mixtral,
  Qwen-MoE's ``norm_topk_prob``, OLMoE). The kernel routes from the logits itself.
- ``topk_softmax``: ``softmax(topk(logits).values)`` (GPT-OSS): the same weights as softmax then
  top-k renormalised, so the kernel routes it with ``normalize_routing_weights=1``.
- ``sigmoid``: ``gather(sigmoid(logits), index)`` (DeepSeek's bias-corrected, group-limited
  choice; renormalised and scaled or not). The choice stays lowered op by op, exactly as traced;
  the kernel receives it as ``log`` of the routing matrix (``-inf`` off the chosen experts), which
  its softmax and top-k turn back into ``w / sum(w)``, and the output is scaled by ``sum(w)``.
  Exact for positive weights, which sigmoid scores, their renormalisation and a positive scaling
  factor are.

Each of these, top-k and the renormalisation are the claim's attributes; shared experts (Qwen-MoE's
gated one, DeepSeek's) are plain MLPs beside the block and stay lowered, which the attributes say.
The pattern declines, leaving the node to the compact decomposition (``SelectedExperts``, only the
chosen experts' rows), for any other router, experts that are not SwiGLU (the CPU kernel's only
activation) or a model not in float32. Experts the capture itself refused run transformers'
``batched_mm`` path, op by op; ``match_region`` reports why.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
import torch
import torch.fx

from lowering.context import LoweringContext
from mobius.components.moe import MS, FusedMoE
from patterns import experts
from patterns.base import (
    CASTS,
    Claim,
    Decline,
    Region,
    asserts_on,
    aten,
    is_op,
    module_of,
    skip_casts,
)

FLOAT = ir.DataType.FLOAT


@dataclass
class Router:
    """What the pattern read from the router: kind, renormalisation, scale, and what it claims."""

    kind: str  # softmax_topk | topk_softmax | sigmoid
    top_k: int
    normalize: bool
    logits: torch.fx.Node | None  # what the kernel routes from (None: explicit weights)
    nodes: set[torch.fx.Node] = field(default_factory=set)
    scale: float = 1.0
    group_limited: bool = False


def _getitem(node: object, index: int) -> torch.fx.Node | None:
    """The ``topk`` whose ``index``-th output ``node`` is (through casts), or None."""
    node = skip_casts(node)
    if isinstance(node, torch.fx.Node) and node.target is operator.getitem:
        source, i = node.args
        if i == index and is_op(source, aten.topk):
            return source
    return None


def _casts_between(top: torch.fx.Node, value: object) -> set[torch.fx.Node]:
    nodes = set()
    while is_op(value, *CASTS) and value is not top:
        nodes.add(value)
        value = value.args[0]
    return nodes


def _topk_k(topk: torch.fx.Node) -> int | None:
    args = list(topk.args) + [None] * 5
    k = args[1]
    dim = args[2] if args[2] is not None else topk.kwargs.get("dim", -1)
    largest = args[3] if args[3] is not None else topk.kwargs.get("largest", True)
    rank = topk.args[0].meta["val"].dim()
    if not isinstance(k, int) or dim % rank != rank - 1 or not largest:
        return None
    return k


def _is_last_axis(node: torch.fx.Node, dim: object) -> bool:
    rank = node.meta["val"].dim()
    return isinstance(dim, int) and dim % rank == rank - 1


def _renormalised(weights: object, values: torch.fx.Node) -> tuple[bool, set] | None:
    """(True, nodes) for ``values / values.sum(-1, keepdim=True)``, (False, {}) for ``values``."""
    node = skip_casts(weights)
    nodes = _casts_between(node, weights)
    if node is values:
        if any(
            getattr(getattr(u.target, "_schema", None), "is_mutable", False) for u in values.users
        ):
            return None  # written in place: what is read is not the plain top-k values
        return False, nodes
    if is_op(node, aten.div, aten.div_) and skip_casts(node.args[0]) is values:
        total = skip_casts(node.args[1])
        if (
            is_op(total, aten.sum)
            and skip_casts(total.args[0]) is values
            and _is_last_axis(values, list(total.args[1])[0])
            and len(total.args[1]) == 1
        ):
            nodes |= {node, total} | _casts_between(total, node.args[1])
            nodes |= _casts_between(values, node.args[0]) | _casts_between(values, total.args[0])
            return True, nodes
    return None


def _softmax_input(node: object) -> torch.fx.Node | None:
    node = skip_casts(node)
    if is_op(node, aten.softmax, aten._softmax) and _is_last_axis(node, node.args[1]):
        return node
    return None


def read_router(index: object, weights: object) -> Router | str:
    """The router behind an experts call's index and weights, or why it is none the kernel runs."""
    topk = _getitem(index, 1)
    if topk is None:
        return "the expert indices are not a top-k"
    k = _topk_k(topk)
    if k is None:
        return "the top-k is not the k largest over the experts axis"
    index_node = skip_casts(index)
    values = next((u for u in topk.users if u.target is operator.getitem and u.args[1] == 0), None)
    chosen = {topk, index_node} | _casts_between(index_node, index)
    softmax = _softmax_input(topk.args[0])
    if softmax is not None and values is not None:  # softmax, then top-k
        found = _renormalised(weights, values)
        if found is None:
            return "the softmax top-k weights are changed by more than a renormalisation"
        normalize, nodes = found
        nodes |= chosen | {values, softmax} | _casts_between(softmax, topk.args[0])
        return Router("softmax_topk", k, normalize, softmax.args[0], nodes)
    after = _softmax_input(weights)
    if after is not None and values is not None and skip_casts(after.args[0]) is values:
        nodes = chosen | {values, after} | _casts_between(after, weights)
        nodes |= _casts_between(values, after.args[0])
        return Router("topk_softmax", k, True, topk.args[0], nodes)
    return _sigmoid_router(weights, index_node, k) or (
        "the router is none of softmax then top-k, top-k then softmax, or gathered sigmoid scores"
    )


def _sigmoid_router(weights: object, index: torch.fx.Node, k: int) -> Router | None:
    """``gather(sigmoid(logits), -1, index)`` [/ (sum + eps)] [* scale], positive throughout."""
    node, scale, normalize = skip_casts(weights), 1.0, False
    if is_op(node, aten.mul, aten.mul_) and isinstance(node.args[1], (int, float)):
        scale, node = float(node.args[1]), skip_casts(node.args[0])
    if is_op(node, aten.div, aten.div_):
        total = skip_casts(node.args[1])
        if is_op(total, aten.add) and isinstance(total.args[1], (int, float)):
            if total.args[1] < 0:
                return None
            total = skip_casts(total.args[0])
        if not (is_op(total, aten.sum) and skip_casts(total.args[0]) is skip_casts(node.args[0])):
            return None
        normalize, node = True, skip_casts(node.args[0])
    if not (is_op(node, aten.gather) and skip_casts(node.args[2]) is index and scale > 0):
        return None
    scores = skip_casts(node.args[0])
    if not is_op(scores, aten.sigmoid):
        return None
    choice = skip_casts(_getitem(index, 1).args[0])
    group_limited = is_op(choice, aten.masked_fill, aten.where)
    return Router("sigmoid", k, normalize, None, set(), scale, group_limited)


def _shared_experts(node: torch.fx.Node, block: str) -> list[str]:
    """Module paths under ``block`` named like shared experts, which run beside the routed ones."""
    found = set()
    for other in node.graph.nodes:
        path = module_of(other)[0] if other.op == "call_function" else ""
        if path.startswith(block + ".") and "shared_expert" in path[len(block) + 1 :]:
            found.add(block + "." + path[len(block) + 1 :].split(".")[0])
    return sorted(found)


def match(node: torch.fx.Node, context: object = None) -> Claim | Decline | None:
    if node.op != "call_function" or node.target is not experts.OP:
        return None
    module = module_of(node)[0]
    hidden, index, weights, w1, _, _, _, activation, transposed, alpha, beta, limit = node.args
    router = read_router(index, weights)
    if isinstance(router, str):
        return Decline("moe", module, f"{router}; the chosen experts are computed one by one")
    if activation not in ("silu", "swiglu"):
        return Decline(
            "moe", module, f"onnxruntime's CPU MoE runs SwiGLU experts only, not {activation}"
        )
    dtype = hidden.meta["val"].dtype
    if dtype != torch.float32:
        return Decline("moe", module, f"onnxruntime's CPU MoE runs float32 only, not {dtype}")
    block = module.rpartition(".")[0]
    attributes = {
        "routing": router.kind,
        "top_k": router.top_k,
        "renormalize": router.normalize,
        "num_experts": int(w1.meta["val"].shape[0]),
        "activation": activation,
    }
    if router.kind == "sigmoid":
        attributes |= {"routed_scaling": router.scale, "group_limited": router.group_limited}
    shared = _shared_experts(node, block)
    if shared:
        attributes["shared_experts"] = ", ".join(shared) + " (lowered beside the kernel)"

    def emit(ctx: LoweringContext):
        ctx.op.builder.graph.opset_imports.setdefault(MS, 1)
        fused = _component(ctx, node, router)
        x = ctx.value(hidden)
        if router.logits is not None:
            return fused(ctx.op, x, ctx.value(router.logits))
        return _explicit(ctx, fused, x, ctx.value(index), ctx.value(weights), attributes)

    nodes = {node} | router.nodes
    nodes |= asserts_on(nodes)
    return Claim("moe", "MoE (com.microsoft)", module, nodes, node, emit, attributes)


def _explicit(ctx: LoweringContext, fused: FusedMoE, x, index, weights, attributes: dict):
    """The kernel fed a routing decided outside it: ``log(w)`` on the chosen experts, ``-inf``
    elsewhere, so its softmax over the top k gives ``w / sum(w)``; times ``sum(w)`` after."""
    op = ctx.op
    weights = op.Cast(weights, to=FLOAT)
    shape = op.Concat(op.Shape(index, end=1), ctx.ints([attributes["num_experts"]]), axis=0)
    zeros = op.ConstantOfShape(shape, value=ir.tensor([0.0], dtype=FLOAT))
    logits = op.Log(op.ScatterElements(zeros, index, weights, axis=1))
    total = op.ReduceSum(weights, ctx.ints([-1]), keepdims=1)
    y = fused(op, x, logits)
    return op.Mul(y, op.CastLike(total, y))


def _component(ctx: LoweringContext, node: torch.fx.Node, router: Router) -> FusedMoE:
    _, _, _, w1, w2, b1, b2, activation, transposed, alpha, beta, limit = node.args
    interleave = activation != "swiglu"  # [gate | up] rows become [g0, u0, g1, u1, ...]
    fc1 = _arranged(ctx, ctx.value(w1), transposed, interleave, "fc1")
    fc2 = _arranged(ctx, ctx.value(w2), transposed, False, "fc2")
    fc1_bias = None if b1 is None else _arranged(ctx, ctx.value(b1), False, interleave, "fc1")
    fc2_bias = None if b2 is None else ctx.value(b2)
    return FusedMoE(
        router.top_k,
        router.normalize or router.kind == "sigmoid",
        alpha,
        beta,
        None if math.isinf(limit) else limit,
        fc1=fc1,
        fc2=fc2,
        fc1_bias=fc1_bias,
        fc2_bias=fc2_bias,
        name="moe",
    )


def _interleaved(a: np.ndarray) -> np.ndarray:
    """Rows (axis 1) ``[gate | up]`` -> ``[g0, u0, g1, u1, ...]``, for ``[E, 2I, ...]``; in
    place, one expert at a time (a stacked checkpoint tensor can be tens of GB: no second full
    copy), so ``a`` must be the caller's own array."""
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a)
    rows = a.shape[1]
    for expert in a:
        halves = expert.reshape(2, rows // 2, *a.shape[2:])
        expert[...] = np.swapaxes(halves, 0, 1).reshape(expert.shape)  # a one-expert temporary
    return a


def _arranged(ctx: LoweringContext, value, transpose: bool, interleave: bool, what: str):
    """``value`` as the kernel's ``[E, out, in]`` with interleaved gate/up rows: made lazily from
    the checkpoint tensor when it is an initializer, else by ops in the graph."""
    if not (transpose or interleave):
        return value
    steps: list[Callable[[np.ndarray], np.ndarray]] = []
    labels = []
    if transpose:
        steps.append(lambda a: np.ascontiguousarray(np.swapaxes(a, 1, 2)))
        labels.append("transpose")
    if interleave:
        steps.append(_interleaved)
        labels.append("interleave_gate_up")
    tensor = value.const_value
    if tensor is None or not value.is_initializer():
        return _arranged_in_graph(ctx, value, transpose, interleave)
    dims = [int(d) for d in tensor.shape]
    if transpose:
        dims[1], dims[2] = dims[2], dims[1]

    def make() -> ir.TensorProtocol:
        array = tensor.numpy()
        if not (isinstance(tensor, ir.LazyTensor) and not tensor.cache):
            array = np.array(array)  # not a fresh array of our own: the steps may write into it
        for step in steps:
            array = step(array)
        return ir.tensor(array)

    name = f"{value.name}.{what}"
    lazy = ir.LazyTensor(make, dtype=tensor.dtype, shape=ir.Shape(dims), name=name)
    lazy.metadata_props["mobius.source_key"] = tensor.metadata_props.get(
        "mobius.source_key", value.name or ""
    )
    lazy.metadata_props["mobius.transform"] = ",".join(labels)
    arranged = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=lazy.shape)
    arranged.const_value = lazy
    ctx.op.builder.graph.register_initializer(arranged)
    return arranged


def _arranged_in_graph(ctx: LoweringContext, value, transpose: bool, interleave: bool):
    op = ctx.op
    if transpose:
        value = op.Transpose(value, perm=[0, 2, 1])
    if interleave:
        shape = op.Shape(value)
        halves = op.Reshape(value, op.Concat(op.Shape(value, end=1), ctx.ints([2, -1]),
                                             op.Shape(value, start=2), axis=0))  # fmt: skip
        value = op.Reshape(op.Transpose(halves, perm=[0, 2, 1, *range(3, 3 + _rank(value) - 2)]),
                           shape)  # fmt: skip
    return value


def _rank(value) -> int:
    return len(value.shape) if value.shape is not None else 3


def match_region(region: Region) -> Decline | None:
    """Experts the capture refused (run op by op through ``batched_mm``), with its reason."""
    reason = experts.DECLINED.get(region.cls)
    if reason is None or any(n.target is experts.OP for n in region.nodes):
        return None
    return Decline("moe", region.path, f"experts lowered op by op: {reason}")
