"""MatMulNBits in the forms onnxruntime's CPU kernels run fast, with the same values.

onnxruntime 1.32's CPU EP has fast float32 kernels (``accuracy_level`` 0 or 1) only for 4-bit
weights with uint8 zero points (or none). Two forms that mobius emits exactly fall back to a slow
path, measured on one decode step (M = 1, K = 640, float32, 2 threads):

- **8-bit** weights (GGUF Q8_0, Q5_0 and Q6_K blocks, ``--precision int8``): N = 2048 takes 21 ms
  against 0.11 ms for 4 bits; Gemma3-270M's 262144-row lm_head 3.8 s against 77 ms. The codes are
  split into two 4-bit planes, ``q = 16·hi + lo`` (zero point ``z = 16·zh + zl``), so
  ``(q − z)·d = (hi − zh)·16d + (lo − zl)·d``: two 4-bit MatMulNBits whose outputs are added.
  Codes and scales stay exact (16d is exact in float); only the final sum is rounded. The bytes
  on disk are the same.
- **4-bit with float zero points** (GGUF Q4_1 and Q4_K, ``q·d + m``): 50× slower than uint8 zero
  points. Held instead as symmetric 4-bit (implicit zero point 8) plus a per-block offset,
  ``(q − zp)·d = (q − 8)·d + (8 − zp)·d``: ``A @ S`` sums the activation over each block (S is
  a 0/1 ``[K, blocks]`` matrix) and ``@ C`` (``C[b, n] = (8 − zp)·d``) adds the offsets, at about
  3% of the MatMul's work.

Applied only where the CPU EP runs the graph (no ``--ep`` or ``--ep cpu``) and the activation is
float32: GPU kernels take both forms as they are. A tied embedding's GatherBlockQuantized reading
the same 8-bit bytes is split the same way, so the weight is still stored once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from mobius.quant.blocks import LazyPacking
from mobius.quant.gather import swap_node
from mobius.quant.linears import MS_DOMAIN

FLOAT = ir.DataType.FLOAT
SPLIT_8BIT = "on the CPU EP as two 4-bit planes (16·hi + lo), their products added in float32"
OFFSET_4BIT = "on the CPU EP as symmetric 4-bit plus a per-block offset (A·S)·C, added in float32"


def fast_cpu_forms(model: ir.Model) -> dict[str, str]:
    """Rewrite, in place, each MatMulNBits node the CPU EP would run on a slow path; returns
    ``mobius.source_key`` -> the form it is now held in."""
    forms: dict[str, str] = {}
    planes: dict[str, _Planes] = {}  # by the 8-bit B's name: split once, shared by its readers
    retired: set[str] = set()  # initializers the old forms read
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        if node.domain != MS_DOMAIN or node.op_type != "MatMulNBits" or len(node.inputs) > 6:
            continue
        a, b, scales, *rest = node.inputs
        zero_points = rest[0] if rest else None
        if len(rest) > 1 and rest[1] is not None:  # g_idx: not a form mobius emits
            continue
        bias = rest[2] if len(rest) > 2 else None  # ``nbits_pack.fuse_biases``
        if scales.dtype != FLOAT or not _constants(b, scales, zero_points):
            continue
        bits = node.attributes.get_int("bits", 4)
        accuracy = node.attributes.get_int("accuracy_level", 0)
        if bits == 8 and accuracy <= 1 and (zero_points is None or zero_points.dtype != FLOAT):
            if b.name not in planes:
                planes[b.name] = _Planes(b, scales, zero_points)
                _split_gathers(b, planes[b.name])
            _split_matmul(node, a, planes[b.name], bias)
            retired.update(v.name for v in (b, scales, zero_points) if v is not None)
            forms[_key(b)] = SPLIT_8BIT
        elif bits == 4 and zero_points is not None and zero_points.dtype == FLOAT:
            _offset_matmul(node, a, b, scales, zero_points, bias)
            retired.add(zero_points.name)
            forms[_key(b)] = OFFSET_4BIT
    for name in retired:
        value = model.graph.initializers.get(name)
        if value is not None and not value.uses() and not value.is_graph_output():
            model.graph.initializers.pop(name)
    return forms


def _constants(*values: ir.Value | None) -> bool:
    return all(v is None or v.const_value is not None for v in values)


def _key(value: ir.Value) -> str:
    """The weight's checkpoint key (comma-joined keys for a packed one, ``nbits_pack.py``)."""
    props = value.const_value.metadata_props
    return props.get("mobius.source_key") or props.get("mobius.source_keys") or value.name


class _Planes(LazyPacking):
    """The two 4-bit planes (B, scales, packed zero points) of one 8-bit MatMulNBits weight."""

    def __init__(self, b: ir.Value, scales: ir.Value, zero_points: ir.Value | None) -> None:
        super().__init__(
            reads=[None if v is None else v.const_value for v in (b, scales, zero_points)]
        )
        self.sources = (b, scales, zero_points)
        self.n, self.kb, self.block = (int(d) for d in b.shape)
        self.values: dict[str, list[ir.Value]] = {}
        for plane in ("hi", "lo"):
            self.values[plane] = [
                self._register(plane, "b", ir.DataType.UINT8, [self.n, self.kb, self.block // 2]),
                self._register(plane, "scales", FLOAT, [self.n * self.kb]),
                self._register(
                    plane, "zero_points", ir.DataType.UINT8, [self.n * -(-self.kb // 2)]
                ),
            ]

    def _register(self, plane: str, part: str, dtype: ir.DataType, shape: list[int]) -> ir.Value:
        b = self.sources[0]
        name = f"{b.name[: -len('.b')] if b.name.endswith('.b') else b.name}.{plane}4.{part}"
        source = b.const_value.metadata_props
        metadata = {
            "mobius.source_key": _key(b),
            "mobius.transform": (
                f"{source.get('mobius.transform', '8-bit blocks')}; {plane} 4-bit plane ({part})"
            ),
        }
        return _register(b.graph, self.part(f"{plane}.{part}", name, dtype, shape), metadata)

    def _pack(self) -> None:
        b, scales, zero_points = (
            None if v is None else v.const_value.numpy() for v in self.sources
        )
        codes = b.reshape(self.n, self.kb, self.block)
        zero = (
            np.full((self.n, self.kb), 128, np.uint8)
            if zero_points is None
            else zero_points.reshape(self.n, self.kb)
        )
        scales = scales.reshape(self.n, self.kb)
        for plane, shift, scale in (("hi", 4, scales * np.float32(16)), ("lo", 0, scales)):
            nibbles = (codes >> shift) & 15
            self.pending[f"{plane}.b"] = nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)
            self.pending[f"{plane}.scales"] = scale.reshape(-1)
            self.pending[f"{plane}.zero_points"] = _pack_nibbles((zero >> shift) & 15).reshape(-1)


def _pack_nibbles(values: np.ndarray) -> np.ndarray:
    """[N, blocks] values below 16 -> [N, ceil(blocks / 2)] bytes, low nibble first."""
    if values.shape[1] % 2:
        values = np.concatenate([values, np.zeros((len(values), 1), np.uint8)], axis=1)
    return (values[:, 0::2] | (values[:, 1::2] << 4)).astype(np.uint8)


def _nbits_node(like: ir.Node, inputs: list[ir.Value], suffix: str) -> ir.Node:
    attributes = {**{k: v for k, v in like.attributes.items()}}
    attributes["bits"] = ir.AttrInt64("bits", 4)
    return ir.Node(
        MS_DOMAIN,
        "MatMulNBits",
        inputs,
        attributes=list(attributes.values()),
        name=f"{like.name}.{suffix}",
        metadata_props=dict(like.metadata_props),
    )


def _add(graph: ir.Graph, before: ir.Node, x: ir.Value, y: ir.Value, name: str) -> ir.Node:
    add = ir.Node("", "Add", [x, y], name=name)
    graph.insert_before(before, add)
    return add


def _with_bias(inputs: list[ir.Value | None], bias: ir.Value | None) -> list[ir.Value | None]:
    """``inputs`` (A, B, scales[, zero points]) with ``bias`` as MatMulNBits' input 5."""
    if bias is None:
        return inputs
    return [*inputs, *[None] * (5 - len(inputs)), bias]


def _split_matmul(
    node: ir.Node, a: ir.Value, planes: _Planes, bias: ir.Value | None = None
) -> None:
    """The low plane's node adds the bias, if any: the smaller partial sum, so the bias is
    rounded at its scale, not at the high plane's (16x the step)."""
    graph = node.graph
    halves = []
    for plane in ("hi", "lo"):
        inputs = [a, *planes.values[plane]]
        half = _nbits_node(node, _with_bias(inputs, bias) if plane == "lo" else inputs, plane)
        graph.insert_before(node, half)
        halves.append(half.outputs[0])
    swap_node(node, ir.Node("", "Add", halves, name=f"{node.name}.planes"))


def _split_gathers(b: ir.Value, planes: _Planes) -> None:
    """Each GatherBlockQuantized over reshaped 8-bit parts of ``b`` -> two 4-bit ones, added."""
    for reshape, _ in list(b.uses()):
        if reshape.op_type != "Reshape":
            continue
        rows = reshape.inputs[1]
        for gather, index in list(reshape.outputs[0].uses()):
            if gather.op_type != "GatherBlockQuantized" or index != 0:
                continue
            graph, halves = gather.graph, []
            for plane in ("hi", "lo"):
                flat = []
                for value in planes.values[plane]:
                    as_rows = ir.Node("", "Reshape", [value, rows], name=f"{value.name}.as_rows")
                    graph.insert_before(gather, as_rows)
                    flat.append(as_rows.outputs[0])
                data, scales, zero_points = flat
                attributes = dict(gather.attributes.items())
                attributes["bits"] = ir.AttrInt64("bits", 4)
                half = ir.Node(
                    MS_DOMAIN,
                    "GatherBlockQuantized",
                    [data, gather.inputs[1], scales, zero_points],
                    attributes=list(attributes.values()),
                    name=f"{gather.name}.{plane}",
                    metadata_props=dict(gather.metadata_props),
                )
                graph.insert_before(gather, half)
                halves.append(half.outputs[0])
            swap_node(gather, ir.Node("", "Add", halves, name=f"{gather.name}.planes"))
    for source in planes.sources:  # the old parts' reshapes that no lookup reads any more
        for reshape, _ in list(source.uses()) if source is not None else []:
            if reshape.op_type == "Reshape" and not reshape.outputs[0].uses():
                reshape.graph.remove(reshape, safe=True)


def _offset_matmul(
    node: ir.Node,
    a: ir.Value,
    b: ir.Value,
    scales: ir.Value,
    zero_points: ir.Value,
    bias: ir.Value | None = None,
) -> None:
    graph = node.graph
    n, kb = (int(d) for d in b.shape[:2])
    k, block = node.attributes.get_int("K"), node.attributes.get_int("block_size")
    sums = _block_sums(b.graph, k, kb, block)
    offsets = _register_offsets(b, scales, zero_points, n, kb)
    symmetric = _nbits_node(node, _with_bias([a, b, scales], bias), "symmetric")
    graph.insert_before(node, symmetric)
    per_block = ir.Node("", "MatMul", [a, sums], name=f"{node.name}.block_sums")
    graph.insert_before(node, per_block)
    offset = ir.Node("", "MatMul", [per_block.outputs[0], offsets], name=f"{node.name}.offsets")
    graph.insert_before(node, offset)
    swap_node(node, ir.Node("", "Add", [symmetric.outputs[0], offset.outputs[0]]))


def _block_sums(graph: ir.Graph, k: int, kb: int, block: int) -> ir.Value:
    """The 0/1 ``[K, blocks]`` matrix summing an activation over each block (one per shape)."""
    name = f"mobius.block_sums.{k}x{block}"
    if name in graph.initializers:
        return graph.initializers[name]
    matrix = (np.arange(k)[:, None] // block == np.arange(kb)[None, :]).astype(np.float32)
    value = ir.Value(name=name, type=ir.TensorType(FLOAT), shape=ir.Shape([k, kb]))
    value.const_value = ir.tensor(matrix, name=name)
    graph.register_initializer(value)
    return value


def _register_offsets(
    b: ir.Value, scales: ir.Value, zero_points: ir.Value, n: int, kb: int
) -> ir.Value:
    """``C[block, n] = (8 − zero_point)·scale``, computed when saved (in float64, then rounded)."""
    name = f"{scales.name}.block_offsets"

    def compute() -> ir.TensorProtocol:
        s = scales.const_value.numpy().astype(np.float64).reshape(n, kb)
        z = zero_points.const_value.numpy().astype(np.float64).reshape(n, kb)
        return ir.tensor(np.ascontiguousarray(((8.0 - z) * s).T.astype(np.float32)), name=name)

    # no mobius.source_key: a part of the weight's entry in the weights record, not a weight
    metadata = {"mobius.transform": f"per-block offsets (8 − zero point)·scale of {_key(b)}"}
    return _lazy_initializer(b.graph, name, FLOAT, [kb, n], compute, metadata)


def _lazy_initializer(
    graph: ir.Graph,
    name: str,
    dtype: ir.DataType,
    shape: list[int],
    get: Callable[[], ir.TensorProtocol],
    metadata: dict[str, str],
) -> ir.Value:
    """Register an initializer whose values ``get`` makes when the model is saved."""
    return _register(
        graph, ir.LazyTensor(get, dtype=dtype, shape=ir.Shape(shape), name=name), metadata
    )


def _register(graph: ir.Graph, lazy: ir.LazyTensor, metadata: dict[str, str]) -> ir.Value:
    lazy.metadata_props.update(metadata)
    value = ir.Value(name=lazy.name, type=ir.TensorType(lazy.dtype), shape=lazy.shape)
    value.const_value = lazy
    graph.register_initializer(value)
    return value
