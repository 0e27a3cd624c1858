"""How each weight of a built model is stored: float, or quantized (and how), read from the graph.

One entry per checkpoint weight the graph reads, whatever put it there: ``--precision``
(round to nearest), a GGUF file's blocks or a GPTQ/AWQ checkpoint's packed tensors all end up as
``MatMulNBits`` or ``GatherBlockQuantized`` inputs, whose attributes and inputs say the scheme.
A quantized weight's scales and zero points are parts of its entry, not entries of their own.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import onnx_ir as ir

MS = "com.microsoft"
FLOAT_BITS = {ir.DataType.FLOAT: 32, ir.DataType.FLOAT16: 16, ir.DataType.BFLOAT16: 16}
# op_type -> (index of the packed data, of its scales, of its zero points) for each weight it reads
QUANTIZED_OPS = {
    "MatMulNBits": [(1, 2, 3)],
    "GatherBlockQuantized": [(0, 2, 3)],
    "QMoE": [(2, 3, 11), (5, 6, 12)],  # the experts' fc1 and fc2
}
BITS_ATTRIBUTE = {"QMoE": "expert_weight_bits"}


@dataclass
class WeightScheme:
    """One weight's storage: ``format`` ``float`` (``bits`` 32 or 16, no blocks) or the op that
    reads it quantized; ``block_size`` elements share one scale; ``zero_points``: asymmetric;
    ``dtype``: the float type it computes in (the scales' type when quantized)."""

    name: str  # the initializer in the graph
    source: str  # its checkpoint key(s), comma-separated; the name itself when they are equal
    format: str  # float | MatMulNBits | GatherBlockQuantized
    bits: int
    block_size: int
    zero_points: bool
    dtype: str


def _source(value: ir.Value, sources: dict[str, str]) -> str:
    meta = value.const_value.metadata_props if value.const_value is not None else {}
    name = value.name or ""
    return (
        meta.get("mobius.source_key") or meta.get("mobius.source_keys") or sources.get(name, name)
    )


def _is_checkpoint_weight(value: ir.Value, sources: dict[str, str]) -> bool:
    meta = value.const_value.metadata_props if value.const_value is not None else {}
    return (
        "mobius.source_key" in meta or "mobius.source_keys" in meta or (value.name or "") in sources
    )


def _stored(value: ir.Value | None) -> ir.Value | None:
    """The initializer behind ``value``, through the Reshapes that view packed rows."""
    while value is not None and not value.is_initializer():
        producer = value.producer()
        if producer is None or producer.op_type != "Reshape":
            return value
        value = producer.inputs[0]
    return value


def weight_schemes(model: ir.Model) -> list[WeightScheme]:
    """The storage of every checkpoint weight ``model`` reads, in initializer order."""
    sources = json.loads(model.metadata_props.get("mobius.weight_sources", "{}"))
    quantized: dict[str, WeightScheme] = {}
    parts: set[str] = set()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain != MS or node.op_type not in QUANTIZED_OPS:
            continue
        for data, scales, zeros in QUANTIZED_OPS[node.op_type]:
            inputs = list(node.inputs) + [None] * 16
            weight, scale, zero = (_stored(inputs[i]) for i in (data, scales, zeros))
            if weight is None or not weight.is_initializer():
                continue
            quantized[weight.name] = WeightScheme(
                name=weight.name,
                source=_source(weight, sources),
                format=node.op_type,
                bits=node.attributes.get_int(BITS_ATTRIBUTE.get(node.op_type, "bits"), 4),
                block_size=node.attributes.get_int("block_size", 0),
                zero_points=zero is not None,
                dtype=scale.dtype.name if scale is not None and scale.dtype is not None else "",
            )
            parts |= {v.name for v in (scale, zero) if v is not None}
    out = []
    for name, value in model.graph.initializers.items():
        if name in quantized:
            out.append(quantized[name])
        elif (
            name not in parts
            and value.dtype in FLOAT_BITS
            and _is_checkpoint_weight(value, sources)
        ):
            out.append(
                WeightScheme(
                    name,
                    _source(value, sources),
                    "float",
                    FLOAT_BITS[value.dtype],
                    0,
                    False,
                    value.dtype.name,
                )  # fmt: skip
            )
    return out


def to_json(schemes: list[WeightScheme]) -> list[dict[str, Any]]:
    return [asdict(s) for s in schemes]
