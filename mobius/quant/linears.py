"""Weight-only int4/int8 quantization: a pass over the emitted model that turns every linear layer
(``MatMul`` or ``Gemm`` by a 2-D parameter initializer) into ``com.microsoft`` ``MatMulNBits``.

Emission is untouched. The quantized initializers are lazy: each weight is read, quantized and
packed only when the model is saved, one weight at a time (its three tensors share one result,
dropped once all three are written), so peak memory stays one float weight plus its packed form.
"""

from __future__ import annotations

import ast
import fnmatch
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
import torch

from mobius.errors import ConfigError, WeightsError
from mobius.output.weights import _read_into
from mobius.quant.blocks import LazyPacking, Packed, Scheme, quantize_rows
from mobius.quant.gather import _lookups, share_with_gathers, swap_node
from mobius.quant.moe import quantize_experts

log = logging.getLogger("mobius")

PRECISIONS = {"int4": 4, "int8": 8}
MS_DOMAIN = "com.microsoft"
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16)


def default_accuracy_level(ep: str | None, precision: str | None) -> int:
    """MatMulNBits' ``accuracy_level`` when none is given: 4 (int8 activations) for
    ``--precision`` weights in the CPU-tuned graph (``--ep cpu``), as the genai builder's ``-e cpu``:
    on SmolLM2-135M it decodes 1.6x faster than level 0 at the same top-1 agreement (0.674 against
    0.676 over 512 positions, docs/benchmarks.md); else 0, the dequantized weights' exact product
    (the portable graph, and the blocks a GGUF/GPTQ/AWQ source keeps exactly)."""
    return 4 if ep == "cpu" and precision is not None else 0


@dataclass(frozen=True)
class QuantOptions:
    """What the user asked for: ``precision`` ("int4" or "int8"), ``block_size``, ``symmetric``,
    ``accuracy_level`` and ``exclude`` (globs over module paths, kept in float)."""

    precision: str = "int4"
    block_size: int = 32
    symmetric: bool = False
    accuracy_level: int = 0
    exclude: tuple[str, ...] = ()

    def check(self, dtype: str) -> Scheme:
        """The Scheme, or a ConfigError naming the option that cannot be honoured."""
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"unknown precision '{self.precision}'; choose one of: {', '.join(PRECISIONS)}"
            )
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ConfigError(
                "--block-size must be a power of two of at least 16 (MatMulNBits), "
                f"got {self.block_size}"
            )
        if self.accuracy_level not in range(5):
            raise ConfigError(f"--accuracy-level must be 0 to 4, got {self.accuracy_level}")
        if dtype not in ("f32", "f16"):
            raise ConfigError(
                f"--precision {self.precision} needs --dtype f32 or f16 (MatMulNBits has no "
                f"{dtype} kernel on CPU)"
            )
        return Scheme(
            PRECISIONS[self.precision], self.block_size, self.symmetric, self.accuracy_level
        )


@dataclass
class QuantizeReport:
    """What the pass did, for mobius.json: the scheme and the fate of every linear weight."""

    scheme: Scheme
    exclude: list[str]
    quantized: list[str] = field(default_factory=list)  # linear parameter names
    excluded: list[str] = field(default_factory=list)  # matched --quant-exclude, kept float
    # a tied embedding whose lookup became GatherBlockQuantized over the lm_head's packed bytes
    shared_embedding: list[str] = field(default_factory=list)
    kept_float: list[str] = field(
        default_factory=list
    )  # also read by another op (a tied embedding)
    # an untied embedding: GatherBlockQuantized over its own packed bytes
    quantized_embedding: list[str] = field(default_factory=list)
    # stacked expert weights of MoE blocks: quantized into QMoE, or kept float (key -> why)
    quantized_experts: list[str] = field(default_factory=list)
    float_experts: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        s = self.scheme
        return {
            "scheme": "MatMulNBits, round to nearest, weight only",
            "precision": s.name,
            "bits": s.bits,
            "block_size": s.block_size,
            "symmetric": s.symmetric,
            "accuracy_level": s.accuracy_level,
            "exclude": self.exclude,
            "quantized_weights": self.quantized,
            "excluded_weights": self.excluded,
            "embedding_shared_with_lm_head": self.shared_embedding,
            "float_weights_also_kept": self.kept_float,
            "embedding_quantized": self.quantized_embedding,
            "quantized_experts": self.quantized_experts,
            "float_experts": self.float_experts,
        }


def module_of(key: str) -> str:
    """``model.layers.0.mlp.up_proj.weight`` -> ``model.layers.0.mlp.up_proj``."""
    return key[: -len(".weight")] if key.endswith(".weight") else key


def excluded_by(module: str, key: str, patterns: Sequence[str]) -> bool:
    """A glob matches the linear's module path, its weight's checkpoint key or that key's module
    (a tied ``lm_head`` reads ``model.embed_tokens.weight``: ``lm_head`` and the key both match);
    a packed weight (comma-joined keys) is excluded when any of its keys is."""
    keys = key.split(",")
    names = (module, key, *keys, *map(module_of, keys))
    return any(fnmatch.fnmatchcase(name, p) for p in patterns for name in names)


def linear_module(node: ir.Node, key: str) -> str:
    """The module path of the linear ``node`` computes (from the exporter's name scopes), else
    the one its weight's key names."""
    scopes = node.metadata_props.get("pkg.onnxscript.name_scopes")
    try:
        names = ast.literal_eval(scopes) if scopes else []
    except (ValueError, SyntaxError):
        names = []
    return names[-1] if names and isinstance(names[-1], str) else module_of(key)


def quantize_linears(
    model: ir.Model, scheme: Scheme, exclude: Sequence[str] = ()
) -> QuantizeReport:
    """Replace each linear by a parameter with MatMulNBits, in place; return what was done."""
    report = QuantizeReport(scheme, list(exclude))
    for node, a, weight, transposed, key in linear_nodes(model):
        module = linear_module(node, key)
        name = f"{module}.weight"  # the linear's parameter (a tied one is named by its module)
        if excluded_by(module, key, exclude):
            report.excluded.append(name)
            continue
        packed = _replace(node, a, weight, transposed, key, scheme)
        report.quantized.append(name)
        if weight.uses() and share_with_gathers(weight, packed, scheme):
            report.shared_embedding.append(key)
        if weight.uses():
            report.kept_float.append(key)
        elif weight.is_initializer():
            weight.graph.initializers.pop(weight.name, None)
    _quantize_lookups(model, scheme, exclude, report)
    report.quantized_experts, report.float_experts = quantize_experts(
        model, scheme, lambda key: excluded_by(module_of(key), key, exclude)
    )
    if report.quantized or report.quantized_embedding or report.quantized_experts:
        model.opset_imports.setdefault(MS_DOMAIN, 1)
    log.info(
        "quantized %d linear weights to %s (%d excluded)",
        len(report.quantized),
        scheme.name,
        len(report.excluded),
    )
    return report


def _quantize_lookups(
    model: ir.Model, scheme: Scheme, exclude: Sequence[str], report: QuantizeReport
) -> None:
    """An embedding read only by lookups (an untied one: a tied one went with its lm_head)
    becomes GatherBlockQuantized over its own packed rows, unless excluded or its width is not
    a whole number of blocks (a lookup would then return the padding)."""
    for value in list(model.graph.initializers.values()):
        tensor = value.const_value
        if tensor is None or value.dtype not in _FLOATS or len(value.shape or ()) != 2:
            continue
        if "mobius.source_key" not in tensor.metadata_props or not _lookups(value):
            continue
        key = source_key(value)
        n, k = (int(d) for d in value.shape)
        if excluded_by(module_of(key), key, exclude):
            report.excluded.append(key)
            continue
        if k % scheme.block_size:
            continue
        shared = _SharedPacking(_nk_slabs(tensor, True), (n, k), scheme, tensor)
        label = f"{scheme.name} block {scheme.block_size} " + (
            "symmetric" if scheme.symmetric else "asymmetric"
        )
        packed = packed_initializers(value, key, (n, k), scheme, shared, label)
        if share_with_gathers(value, packed, scheme):
            report.quantized_embedding.append(key)
            model.graph.initializers.pop(value.name, None)


def linear_weight(node: ir.Node) -> tuple[ir.Value, ir.Value, bool] | None:
    """(activation, weight, weight is stored [N, K]) when ``node`` is a linear by a parameter."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "MatMul" and len(node.inputs) == 2:
        a, w = node.inputs
        transposed = False
    elif node.op_type == "Gemm" and len(node.inputs) == 2:
        attrs = node.attributes
        if attrs.get_int("transA", 0) or attrs.get_float("alpha", 1.0) != 1.0:
            return None
        a, w = node.inputs
        transposed = bool(attrs.get_int("transB", 0))
    else:
        return None
    if a is None or w is None or a.const_value is not None or w.const_value is None:
        return None
    if not w.is_initializer() or w.dtype not in _FLOATS or len(w.shape) != 2:
        return None
    if a.shape is not None and len(a.shape) < 2:
        return None
    props = w.const_value.metadata_props
    if "mobius.source_key" not in props and "mobius.source_keys" not in props:
        return None  # a buffer or constant made by the trace, not a parameter
    return a, w, transposed


def linear_nodes(model: ir.Model) -> Iterator[tuple[ir.Node, ir.Value, ir.Value, bool, str]]:
    """Each linear by a stored weight, as (node, activation, weight, transposed, the weight's
    checkpoint key); over a snapshot of the graph, so that callers may replace the nodes."""
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        found = linear_weight(node)
        if found is not None:
            a, weight, transposed = found
            yield node, a, weight, transposed, source_key(weight)


def source_key(weight: ir.Value) -> str:
    """The checkpoint key a weight initializer was read from, comma-joined keys for a packed one
    (``--ep cpu``'s q/k/v), its name when it has none."""
    props = weight.const_value.metadata_props
    return props.get("mobius.source_key") or props.get("mobius.source_keys") or weight.name or ""


def _replace(
    node: ir.Node, a: ir.Value, weight: ir.Value, transposed: bool, key: str, scheme: Scheme
) -> list[ir.Value]:
    """Swap ``node`` for MatMulNBits; returns its initializers (B, scales[, zero_points])."""
    n, k = linear_shape(weight, transposed)
    tensor = weight.const_value
    shared = _SharedPacking(_nk_slabs(tensor, transposed), (n, k), scheme, tensor)
    label = f"{scheme.name} block {scheme.block_size} " + (
        "symmetric" if scheme.symmetric else "asymmetric"
    )
    packed = packed_initializers(weight, key, (n, k), scheme, shared, label)
    swap_for_matmulnbits(node, a, packed, (n, k), scheme)
    return packed


def linear_shape(weight: ir.Value, transposed: bool) -> tuple[int, int]:
    """(N, K) of a linear by ``weight`` (stored [N, K] when ``transposed``, else [K, N])."""
    rows, cols = (int(d) for d in weight.shape)
    return (rows, cols) if transposed else (cols, rows)


def packed_initializers(
    weight: ir.Value,
    key: str,
    nk: tuple[int, int],
    scheme: Scheme,
    packing: LazyPacking,
    label: str,
    *,
    float_zero_points: bool = False,
) -> list[ir.Value]:
    """Register the lazy MatMulNBits initializers (B, scales[, zero_points]) of ``weight``, each
    produced by ``packing`` when saved; zero points are uint8 (packed for 4 bits) or,
    with ``float_zero_points``, one per block in the scales' dtype."""
    n, k = nk
    kb = scheme.blocks(k)
    base = f"{weight.name[:-2] if weight.name.endswith('.T') else weight.name}.{scheme.name}"
    dtype = weight.dtype
    parts: list[tuple[str, ir.DataType, list[int]]] = [
        ("b", ir.DataType.UINT8, [n, kb, scheme.block_size * scheme.bits // 8]),
        ("scales", dtype, [n * kb]),
    ]
    if float_zero_points:
        parts.append(("zero_points", dtype, [n * kb]))
    elif not scheme.symmetric:
        parts.append(("zero_points", ir.DataType.UINT8, [n * (-(-kb * scheme.bits // 8))]))
    values = []
    for part, part_dtype, shape in parts:
        name = f"{base}.{part}"
        lazy = packing.part(part, name, part_dtype, shape)
        lazy.metadata_props["mobius.source_key"] = key
        lazy.metadata_props["mobius.transform"] = f"{label} ({part})"
        value = ir.Value(name=name, type=ir.TensorType(part_dtype), shape=lazy.shape)
        value.const_value = lazy
        weight.graph.register_initializer(value)
        values.append(value)
    return values


def swap_for_matmulnbits(
    node: ir.Node, a: ir.Value, packed: list[ir.Value], nk: tuple[int, int], scheme: Scheme
) -> None:
    """Put a MatMulNBits of ``a`` by ``packed`` where the linear ``node`` is."""
    n, k = nk
    replacement = ir.Node(
        MS_DOMAIN,
        "MatMulNBits",
        [a, *packed],
        attributes=[
            ir.AttrInt64("K", k),
            ir.AttrInt64("N", n),
            ir.AttrInt64("bits", scheme.bits),
            ir.AttrInt64("block_size", scheme.block_size),
            ir.AttrInt64("accuracy_level", scheme.accuracy_level),
        ],
        name=f"{node.name or packed[0].name}.MatMulNBits",
        metadata_props=dict(node.metadata_props),
    )
    swap_node(node, replacement)


SLAB_BYTES = 4 << 20  # rows of a weight read and quantized at a time


def _nk_slabs(tensor: ir.TensorProtocol, transposed: bool) -> Callable[[], Iterator[np.ndarray]]:
    """The weight as [N, K] row slabs. A checkpoint tensor (or a ``<key>.T`` of one) is read
    slab by slab from its safetensors file, so not even one whole weight is held in memory."""
    if not transposed:
        # lowering.transposed.TransposedTensor keeps its source's bound ``numpy``: the [N, K] weight
        source = getattr(getattr(tensor, "_source", None), "__self__", None)
        if source is None:
            return lambda: iter([np.ascontiguousarray(tensor.numpy().T)])
        tensor = source
    entry = getattr(
        tensor, "entry", None
    )  # mobius.output.weights.CopiedTensor: bytes as in the file
    if entry is None:
        return lambda: iter([tensor.numpy()])
    return lambda: _file_slabs(entry)


def _file_slabs(entry) -> Iterator[np.ndarray]:
    n, k = entry.shape
    itemsize = torch.empty((), dtype=entry.dtype).element_size()
    rows = max(1, SLAB_BYTES // (k * itemsize))
    with entry.file.open("rb", buffering=0) as source:
        source.seek(entry.offset)
        for start in range(0, n, rows):
            slab = torch.empty((min(rows, n - start), k), dtype=entry.dtype)
            view = memoryview(slab.view(-1).view(torch.uint8).numpy())
            if _read_into(source, view) < len(view):
                raise WeightsError(
                    f"{entry.file.name} ended inside tensor '{entry.key}'; re-download or re-save it"
                )
            yield slab.numpy()


class _SharedPacking(LazyPacking):
    """Quantizes one weight (round to nearest) when its parts are first asked for."""

    def __init__(
        self,
        load: Callable[[], Iterator[np.ndarray]],
        shape: tuple[int, int],
        scheme: Scheme,
        source: ir.TensorProtocol,
    ) -> None:
        super().__init__(reads=[source])
        self.load, self.shape, self.scheme = load, shape, scheme

    def _pack(self) -> None:
        packed: Packed = quantize_rows(self.load(), self.shape, self.scheme)
        self.pending = {"b": packed.b, "scales": packed.scales}
        if packed.zero_points is not None:
            self.pending["zero_points"] = packed.zero_points
