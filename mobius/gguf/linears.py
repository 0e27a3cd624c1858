"""Place a GGUF file's quantized blocks into the emitted model: each linear by a quantized tensor
becomes ``com.microsoft`` ``MatMulNBits`` over the file's own codes, scales and zero points
(``mobius.gguf.blocks``), and a tied embedding's lookup reads the same bytes
(``GatherBlockQuantized``). Nothing is requantized; what cannot be held is dequantized (by the
weight binder, as transformers dequantizes it) and reported."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from mobius.gguf.blocks import DEQUANTIZED_BECAUSE, FLOAT_TYPES, Layout, decode_rows
from mobius.gguf.source import SLAB_ROWS, GGUFCheckpoint
from mobius.quant.blocks import LazyPacking, Scheme
from mobius.quant.gather import share_with_gathers
from mobius.quant.linears import (
    MS_DOMAIN,
    linear_nodes,
    linear_shape,
    packed_initializers,
    swap_for_matmulnbits,
)

log = logging.getLogger("mobius")


@dataclass
class GGUFReport:
    """What became of every GGUF tensor the model reads, for mobius.json and the summary line."""

    file: str
    weights: dict[str, dict] = field(default_factory=dict)  # HF key -> {"gguf_type", "as"}

    def record(self, key: str, gguf_type: str, held_as: str, *, exact: bool | None) -> None:
        self.weights[key] = {"gguf_type": gguf_type, "as": held_as, "exact": exact}

    def note_forms(self, forms: dict[str, str]) -> None:
        """Add to each weight how it is held for the CPU EP (``mobius.quant.nbits_cpu``)."""
        for keys, form in forms.items():
            for key in keys.split(","):  # a packed weight's keys (``mobius.quant.nbits_pack``)
                if key in self.weights:
                    self.weights[key]["as"] += f"; {form}"

    def counts(self) -> Counter:
        return Counter(
            "exact"
            if w["exact"]
            else "rounding"
            if w["exact"] is False
            else "float"
            if w["gguf_type"] in FLOAT_TYPES
            else "dequantized"
            for w in self.weights.values()
        )

    def summary(self) -> str:
        c = self.counts()
        dequantized = sorted(
            {w["gguf_type"] for w in self.weights.values() if w["as"].startswith("dequantized")}
            - set(FLOAT_TYPES)
        )
        why = f" ({', '.join(dequantized)})" if dequantized else ""
        return (
            f"GGUF {self.file}: {c['exact'] + c['rounding']} weights kept quantized "
            f"({c['exact']} bit-exact, {c['rounding']} with float zero points), "
            f"{c['dequantized']} dequantized{why}, {c['float']} stored as float"
        )

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "summary": self.summary(),
            "types": dict(Counter(w["gguf_type"] for w in self.weights.values())),
            "weights": self.weights,
        }


def place_gguf_blocks(
    model: ir.Model, checkpoint: object, dtype: str = "f32", accuracy_level: int = 0
) -> GGUFReport | None:
    """Replace, in place, each linear whose weight is a mappable GGUF tensor by MatMulNBits;
    None when ``checkpoint`` is not a GGUF file's."""
    if not isinstance(checkpoint, GGUFCheckpoint):
        return None
    report = GGUFReport(checkpoint.info.path.name)
    if dtype not in ("f32", "f16"):  # no bfloat16 MatMulNBits kernel on CPU
        _record_the_rest(model, checkpoint, report, f"--dtype {dtype} (MatMulNBits needs f32/f16)")
        log.info("%s", report.summary())
        return report
    placed: dict[str, list[ir.Value]] = {}
    kept_float: set[str] = set()  # also read by an op other than a linear (an embedding lookup)
    for node, a, weight, transposed, key in linear_nodes(model):
        layout = checkpoint.layout(key)
        if layout is None:
            continue
        nk = linear_shape(weight, transposed)
        if tuple(checkpoint.refs[key].shape) != nk:
            continue  # not the [N, K] orientation the blocks are in: leave it to the float path
        scheme = Scheme(layout.bits, layout.block_size, False, accuracy_level)
        if key not in placed:
            placed[key] = _initializers(weight, key, nk, layout, scheme, checkpoint)
        packed = placed[key]
        swap_for_matmulnbits(node, a, packed, nk, scheme)
        if weight.uses() and not layout.float_zero_points:
            share_with_gathers(weight, packed, scheme)
        if not weight.uses() and weight.is_initializer():
            weight.graph.initializers.pop(weight.name, None)
        elif weight.uses():
            kept_float.add(key)
    if placed:
        model.opset_imports.setdefault(MS_DOMAIN, 1)
    for key in placed:
        layout = checkpoint.layout(key)
        held = layout.describe()
        if key in kept_float:
            held += "; also dequantized for its other readers (GatherBlockQuantized takes no "
            held += "float zero points)" if layout.float_zero_points else ")"
        report.record(key, checkpoint.type_name(key), held, exact=layout.exact)
    _record_the_rest(model, checkpoint, report)
    log.info("%s", report.summary())
    return report


def _record_the_rest(
    model: ir.Model, checkpoint: GGUFCheckpoint, report: GGUFReport, reason: str = ""
) -> None:
    """Every other GGUF tensor the model still reads in float, with the reason."""
    for value in model.graph.initializers.values():
        tensor = value.const_value
        key = tensor.metadata_props.get("mobius.source_key") if tensor is not None else None
        if key not in checkpoint.refs or key in report.weights:
            continue
        gguf_type = checkpoint.type_name(key)
        ref = checkpoint.refs[key]
        if gguf_type in FLOAT_TYPES:
            held = "float, as stored"
        elif ref.transformed:
            held = "dequantized: transformers' tensor processor changes its values"
        elif gguf_type in DEQUANTIZED_BECAUSE:
            held = f"dequantized: {DEQUANTIZED_BECAUSE[gguf_type]}"
        elif reason:
            held = f"dequantized: {reason}"
        elif checkpoint.layout(key) is not None:
            held = "dequantized: not read by a linear layer"
        else:
            held = f"dequantized: {gguf_type} is not mapped to MatMulNBits"
        report.record(key, gguf_type, held, exact=None)


def _initializers(
    weight: ir.Value,
    key: str,
    nk: tuple[int, int],
    layout: Layout,
    scheme: Scheme,
    checkpoint: GGUFCheckpoint,
) -> list[ir.Value]:
    packing = _BlockPacking(checkpoint, key, layout, nk, weight.dtype)
    label = f"GGUF {checkpoint.type_name(key)} as {layout.describe()}"
    return packed_initializers(
        weight,
        key,
        nk,
        scheme,
        packing,
        label,
        float_zero_points=layout.float_zero_points,
    )


class _BlockPacking(LazyPacking):
    """Decodes one tensor's blocks (row slab by row slab) on the first request for any of its
    parts; each part is handed out once and dropped."""

    def __init__(
        self,
        checkpoint: GGUFCheckpoint,
        key: str,
        layout: Layout,
        nk: tuple[int, int],
        dtype: ir.DataType,
    ) -> None:
        self.checkpoint, self.key, self.layout, self.nk = checkpoint, key, layout, nk
        self.dtype = dtype.numpy()
        super().__init__()

    def _pack(self) -> None:
        n, k = self.nk
        layout = self.layout
        kb = k // layout.block_size
        b = np.empty((n, kb, layout.block_size * layout.bits // 8), dtype=np.uint8)
        scales = np.empty((n, kb), dtype=self.dtype)
        if layout.float_zero_points:
            zero_points = np.empty((n, kb), dtype=self.dtype)
        else:
            zero_points = np.empty((n, -(-kb * layout.bits // 8)), dtype=np.uint8)
        for start in range(0, n, SLAB_ROWS):
            stop = min(n, start + SLAB_ROWS)
            blocks = decode_rows(self.checkpoint.raw_rows(self.key, start, stop), layout)
            codes = blocks.codes
            b[start:stop] = (
                codes[..., 0::2] | (codes[..., 1::2] << 4) if layout.bits == 4 else codes
            )
            scales[start:stop] = blocks.scales
            zero_points[start:stop] = _pack_zero_points(blocks.zero_points, layout)
        self.pending = {
            "b": b,
            "scales": scales.reshape(-1),
            "zero_points": zero_points.reshape(-1),
        }


def _pack_zero_points(zero: np.ndarray, layout: Layout) -> np.ndarray:
    if layout.float_zero_points or layout.bits == 8:
        return zero
    if zero.shape[1] % 2:
        zero = np.concatenate([zero, np.zeros((len(zero), 1), np.uint8)], axis=1)
    return zero[:, 0::2] | (zero[:, 1::2] << 4)
