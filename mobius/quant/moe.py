"""``--precision int4``: the experts of each ``com.microsoft`` ``MoE`` node into ``QMoE``.

QMoE reads each expert's matrix as MatMulNBits reads one linear: rows of ``K / 2`` bytes (low
nibble first), one scale per ``block_size`` elements of a row, zero points packed two per byte
(or none: symmetric, zero 8). So each expert is quantized by the same round-to-nearest code
(``mobius.quant.blocks.quantize``) and the parts are stacked over experts: weights
``[E, N, K / 2]``, scales ``[E, N, K / block]``, zero points ``[E, N, ceil(K / block / 2)]``.
Lazily, like the linears: a stacked weight is read and quantized when its first part is saved.

**int8 experts** become 8-bit QMoE only at ``accuracy_level`` 4 (the default with ``--ep cpu``).
onnxruntime 1.32's CPU QMoE at 8 bits rounds each activation block to int8 (symmetric, scale
``max|x| / 127`` per ``block_size`` elements, before both matrices) at every accuracy level:
checked on a one-node graph against a reference doing exactly that (2e-6) and against the float
product of the dequantized experts (5e-2). Level 4 asks for int8 activations anyway (that is
what the linears' MatMulNBits do there); below it the experts stay float, with that reason.

Also kept in float, with the reason in ``mobius.json``: experts whose hidden or intermediate
size is not a multiple of the block size (QMoE requires it), and experts matched by
``--quant-exclude``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from mobius.quant.blocks import LazyPacking, Scheme, quantize

log = logging.getLogger("mobius")
MS = "com.microsoft"
# MoE input -> (QMoE weight input, scales input, zero points input)
FC_INPUTS = {2: (2, 3, 11), 4: (5, 6, 12)}
BIASES = {3: 4, 5: 7}  # MoE bias input -> QMoE bias input
INT8_ACTIVATIONS = 4  # the accuracy_level that rounds activations to int8 (MatMulNBits, QMoE)


class _ExpertPacking(LazyPacking):
    """The QMoE parts of one stacked ``[E, N, K]`` weight, made on the first request."""

    def __init__(self, tensor: ir.TensorProtocol, scheme: Scheme) -> None:
        super().__init__(reads=[tensor])
        self.tensor, self.scheme = tensor, scheme

    def _pack(self) -> None:
        stacked = self.tensor.numpy()
        experts, n, _ = stacked.shape
        packs = [quantize(np.asarray(stacked[e], np.float32), self.scheme) for e in range(experts)]
        dtype = stacked.dtype
        self.pending = {
            "b": np.stack([p.b.reshape(n, -1) for p in packs]),
            "scales": np.stack([p.scales.reshape(n, -1).astype(dtype) for p in packs]),
        }
        if not self.scheme.symmetric:
            self.pending["zero_points"] = np.stack([p.zero_points.reshape(n, -1) for p in packs])


def _parts(graph: ir.Graph, weight: ir.Value, scheme: Scheme) -> list[ir.Value | None]:
    """Registered lazy initializers: packed weight, scales, zero points (None if symmetric)."""
    tensor = weight.const_value
    experts, n, k = (int(d) for d in weight.shape)
    blocks = k // scheme.block_size
    packing = _ExpertPacking(tensor, scheme)
    shapes = {
        "b": (ir.DataType.UINT8, [experts, n, k * scheme.bits // 8]),
        "scales": (weight.dtype, [experts, n, blocks]),
        "zero_points": (ir.DataType.UINT8, [experts, n, -(-blocks * scheme.bits // 8)]),
    }
    label = f"QMoE {scheme.name} block {scheme.block_size} " + (
        "symmetric" if scheme.symmetric else "asymmetric"
    )
    out: list[ir.Value | None] = []
    for part in ("b", "scales", "zero_points"):
        if part == "zero_points" and scheme.symmetric:
            out.append(None)
            continue
        dtype, shape = shapes[part]
        name = f"{weight.name}.{scheme.name}.{part}"
        lazy = packing.part(part, name, dtype, shape)
        lazy.metadata_props["mobius.source_key"] = tensor.metadata_props.get(
            "mobius.source_key", weight.name or ""
        )
        lazy.metadata_props["mobius.transform"] = f"{label} ({part})"
        value = ir.Value(name=name, type=ir.TensorType(dtype), shape=lazy.shape, const_value=lazy)
        graph.register_initializer(value)
        out.append(value)
    return out


def why_float(node: ir.Node, scheme: Scheme, excluded: bool) -> str | None:
    """Why the experts of MoE ``node`` stay float under ``scheme`` (None: they become QMoE)."""
    if excluded:
        return "matched --quant-exclude"
    if scheme.bits == 8 and scheme.accuracy_level != INT8_ACTIVATIONS:
        return (
            "onnxruntime's CPU QMoE rounds the activations to int8 for 8-bit experts at every "
            f"accuracy level; they become QMoE at --accuracy-level {INT8_ACTIVATIONS} only"
        )
    if scheme.bits not in (4, 8):
        return f"QMoE has no {scheme.bits}-bit experts"
    for index in FC_INPUTS:
        weight = node.inputs[index]
        if weight is None or not weight.is_initializer() or weight.const_value is None:
            return "the expert weights are not initializers"
        if any(int(d) % scheme.block_size for d in weight.shape[1:]):
            return f"a size of {list(weight.shape)} is not a multiple of the block size"
    return None


def quantize_experts(
    model: ir.Model, scheme: Scheme, is_excluded: Callable[[str], bool]
) -> tuple[list[str], dict[str, str]]:
    """Swap each MoE node's float experts for QMoE; returns (quantized sources, kept -> reason)."""
    done: list[str] = []
    kept: dict[str, str] = {}
    for node in list(model.graph):
        if node.domain != MS or node.op_type != "MoE":
            continue
        weights = [node.inputs[i] for i in FC_INPUTS]
        keys = [
            w.const_value.metadata_props.get("mobius.source_key", w.name)
            if w is not None and w.const_value is not None
            else str(w and w.name)
            for w in weights
        ]
        reason = why_float(node, scheme, any(is_excluded(k) for k in keys))
        if reason is not None:
            kept.update(dict.fromkeys(keys, reason))
            continue
        inputs: list[ir.Value | None] = [None] * 13
        inputs[0], inputs[1] = node.inputs[0], node.inputs[1]
        for moe_index, slots in FC_INPUTS.items():
            parts = _parts(model.graph, node.inputs[moe_index], scheme)
            for slot, value in zip(slots, parts, strict=True):
                inputs[slot] = value
        for moe_index, slot in BIASES.items():
            inputs[slot] = node.inputs[moe_index] if len(node.inputs) > moe_index else None
        while inputs[-1] is None:
            inputs.pop()
        attributes = {a.name: a for a in node.attributes.values()}
        qmoe = ir.node(
            "QMoE",
            inputs,
            attributes={
                **{name: attr.value for name, attr in attributes.items()},
                "expert_weight_bits": scheme.bits,
                "block_size": scheme.block_size,
                "accuracy_level": scheme.accuracy_level,
            },
            domain=MS,
            name=(node.name or "moe") + ".q",
        )
        old = node.outputs[0]
        qmoe.outputs[0].shape, qmoe.outputs[0].type = old.shape, old.type
        model.graph.insert_before(node, qmoe)
        old.replace_all_uses_with(qmoe.outputs[0], replace_graph_outputs=True)
        model.graph.remove(node, safe=True)
        for weight in weights:
            if not weight.uses():
                model.graph.initializers.pop(weight.name, None)
        done += keys
    if done:
        log.info("quantized the experts of %d MoE blocks to QMoE %s", len(done) // 2, scheme.name)
    return done, kept
