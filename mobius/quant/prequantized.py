"""GPTQ and AWQ checkpoints (``quantization_config`` in config.json): their packed 4-bit weights,
zero points and scales go into ``MatMulNBits`` as they are, without requantizing.

Each quantized linear ``<m>`` stores, instead of ``<m>.weight`` ([N, K]):

- GPTQ: ``qweight`` int32 ``[K / 8, N]``, eight 4-bit codes along K per word (lowest bits first);
  ``qzeros`` int32 ``[groups, N / 8]``, eight zero points along N per word; ``scales``
  ``[groups, N]``; ``g_idx`` int32 ``[K]``, each input's group. The original ("gptq", v1) format
  stores each zero point minus one; ``checkpoint_format: gptq_v2`` stores it as is.
- AWQ (``version: gemm``): ``qweight`` int32 ``[K, N / 8]``, eight codes along N per word in the
  interleaved order 0, 2, 4, 6, 1, 3, 5, 7; ``qzeros`` ``[groups, N / 8]`` packed the same way;
  ``scales`` ``[groups, N]``.

Both compute ``w = (q - zero) * scale`` per group of ``group_size`` inputs, which is MatMulNBits'
block. A GPTQ ``g_idx`` other than ``k // group_size`` (act-order) puts the inputs of one group
apart: the linear then reads its inputs through a ``Gather`` that sorts them by group, and its
codes are reordered the same way (exact: a permutation of K on both sides). A ``g_idx`` that does
not give every group ``group_size`` inputs, or a group size that is not a power of two of at
least 16, is dequantized (float MatMul) and reported.

The checkpoint is seen as a float one: ``<m>.weight`` is a virtual entry whose ``load`` dequantizes,
so the trace and binder are untouched; the pass ``place_prequantized`` then swaps each linear's
MatMul for MatMulNBits over the packed tensors.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
import torch

from mobius.output.weights import Checkpoint
from mobius.quant.blocks import Scheme
from mobius.quant.linears import (
    MS_DOMAIN,
    LazyPacking,
    linear_nodes,
    linear_shape,
    packed_initializers,
    swap_for_matmulnbits,
)
from mobius.sources.quantization_config import PrequantSpec
from mobius.sources.readers import PREQUANTIZED, reads
from mobius.sources.safetensors_header import TensorEntry

log = logging.getLogger("mobius")

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # word nibble j holds output column 8 * i + AWQ_ORDER[j]
PARTS = ("qweight", "qzeros", "scales", "g_idx")


@dataclass
class _Linear:
    module: str
    n: int
    k: int
    keys: dict[str, str]  # part -> checkpoint key
    block: int | None = None  # MatMulNBits block size, None when it is dequantized
    declined: str = ""
    # act-order: the input order that makes each group contiguous (a Gather on the activations)
    order: np.ndarray | None = None


@reads(PREQUANTIZED)
class PrequantizedCheckpoint(Checkpoint):
    """A GPTQ/AWQ checkpoint seen as a float one: ``<m>.weight`` dequantizes on ``load``, and
    ``packed`` gives MatMulNBits' parts."""

    def __init__(self, entries: dict[str, TensorEntry], spec: PrequantSpec) -> None:
        self.inner = Checkpoint(entries)
        self.spec = spec
        self.linears: dict[str, _Linear] = {}
        modules = {k.rsplit(".", 1)[0] for k in entries if k.endswith(".qweight")}
        plain = {k: e for k, e in entries.items() if k.rsplit(".", 1)[0] not in modules}
        for module in sorted(modules):
            keys = {p: f"{module}.{p}" for p in PARTS if f"{module}.{p}" in entries}
            linear = self._linear(module, keys, entries)
            key = f"{module}.weight"
            self.linears[key] = linear
            first = entries[keys["qweight"]]
            plain[key] = TensorEntry(key, first.file, "F32", (linear.n, linear.k))
            if f"{module}.bias" in entries:
                plain[f"{module}.bias"] = entries[f"{module}.bias"]
        super().__init__(plain)

    def _linear(self, module: str, keys: dict[str, str], entries: dict) -> _Linear:
        missing = [p for p in ("qweight", "qzeros", "scales") if p not in keys]
        if missing:
            from mobius.errors import WeightsError

            raise WeightsError(
                f"{self.spec.method.upper()} linear {module} has no {', '.join(missing)}; "
                "the checkpoint is incomplete"
            )
        groups, n = entries[keys["scales"]].shape
        qweight = entries[keys["qweight"]].shape
        k = qweight[0] * 8 if self.spec.method == "gptq" else qweight[0]
        linear = _Linear(module, n, k, keys)
        block = k if self.spec.group_size == -1 else self.spec.group_size
        if block < 16 or block & (block - 1) or k % block or k // block != groups:
            linear.declined = f"group size {block} is not a power of two >= 16 dividing K={k}"
        elif "g_idx" in keys:
            g_idx = self.inner.load(keys["g_idx"]).numpy().astype(np.int64)
            counts = np.bincount(g_idx, minlength=groups) if g_idx.min(initial=0) >= 0 else None
            if g_idx.shape != (k,) or counts is None or (counts != block).any():
                linear.declined = (
                    f"g_idx does not give every one of the {groups} groups {block} inputs"
                )
            else:
                linear.block = block
                if not np.array_equal(g_idx, np.arange(k) // block):  # act-order
                    linear.order = np.argsort(g_idx, kind="stable")
        else:
            linear.block = block
        return linear

    def load(self, key: str) -> torch.Tensor:
        linear = self.linears.get(key)
        if linear is None:
            return self.inner.load(key)
        q, zero, scale = self.unpacked(linear)
        if "g_idx" in linear.keys:
            groups = torch.as_tensor(self.inner.load(linear.keys["g_idx"]).numpy()).long()
        else:
            block = linear.k if self.spec.group_size == -1 else self.spec.group_size
            groups = torch.arange(linear.k) // block
        q, zero, scale = torch.from_numpy(q), torch.from_numpy(zero), torch.from_numpy(scale)
        return (q.float() - zero.float()[:, groups]) * scale[:, groups]  # [N, K]

    def unpacked(self, linear: _Linear) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Codes uint8 [N, K], zero points int16 [N, groups], scales float32 [N, groups]."""
        load = self.inner.load
        words = load(linear.keys["qweight"]).numpy().view(np.uint32)
        nibbles = (words[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 15
        if self.spec.method == "gptq":  # [K/8, N, 8] -> [K, N]
            q = nibbles.transpose(0, 2, 1).reshape(linear.k, linear.n).T
        else:  # [K, N/8, 8] -> [K, N], nibble j at column AWQ_ORDER[j]
            q = _awq_columns(nibbles).reshape(linear.k, linear.n).T
        zwords = load(linear.keys["qzeros"]).numpy().view(np.uint32)
        znib = (zwords[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 15
        zcols = znib if self.spec.method == "gptq" else _awq_columns(znib)
        zero = zcols.reshape(zwords.shape[0], linear.n).T.astype(np.int16) + self.spec.zero_offset
        scale = load(linear.keys["scales"]).float().numpy().T
        return np.ascontiguousarray(q, dtype=np.uint8), zero, np.ascontiguousarray(scale)


def _awq_columns(nibbles: np.ndarray) -> np.ndarray:
    """[..., words, 8] by nibble -> [..., words, 8] by output column."""
    out = np.empty_like(nibbles)
    out[..., list(AWQ_ORDER)] = nibbles
    return out


@dataclass
class PrequantReport:
    spec: PrequantSpec
    kept: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)  # act-order: inputs gathered into groups
    dequantized: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        return (
            f"{self.spec.method.upper()}: {len(self.kept)} linear weights kept in MatMulNBits "
            f"(4-bit, block {self.spec.group_size}), {len(self.dequantized)} dequantized"
        )

    def to_json(self) -> dict:
        return {
            **self.spec.to_json(),
            "summary": self.summary(),
            "kept_quantized": self.kept,
            "act_order_inputs_reordered": self.reordered,
            "dequantized": self.dequantized,
        }


def place_prequantized(
    model: ir.Model, checkpoint: object, dtype: str = "f32", accuracy_level: int = 0
) -> PrequantReport | None:
    """Swap every linear by a GPTQ/AWQ weight for MatMulNBits over its packed tensors, in place;
    None when ``checkpoint`` is not a GPTQ/AWQ one."""
    if not isinstance(checkpoint, PrequantizedCheckpoint):
        return None
    report = PrequantReport(checkpoint.spec)
    for key, linear in checkpoint.linears.items():
        if linear.block is None:
            report.dequantized[key] = linear.declined
    if dtype not in ("f32", "f16"):
        report.dequantized.update(
            {k: f"--dtype {dtype} (MatMulNBits needs f32/f16)" for k in checkpoint.linears}
        )
        return report
    for node, a, weight, transposed, key in linear_nodes(model):
        linear = checkpoint.linears.get(key)
        if linear is None or linear.block is None:
            continue
        nk = linear_shape(weight, transposed)
        scheme = Scheme(4, linear.block, False, accuracy_level)
        packing = _Packing(checkpoint, linear, weight.dtype.numpy())
        wide = packing.wide_zero_points()
        label = f"{checkpoint.spec.method.upper()} 4-bit block {linear.block}"
        packed = packed_initializers(
            weight, key, nk, scheme, packing, label, float_zero_points=wide
        )
        if linear.order is not None:
            a = _reorder_inputs(node, a, linear.order, f"{packed[0].name}.act_order")
            report.reordered.append(key)
        swap_for_matmulnbits(node, a, packed, nk, scheme)
        if not weight.uses() and weight.is_initializer():
            weight.graph.initializers.pop(weight.name, None)
        report.kept.append(key)
    if report.kept:
        model.opset_imports.setdefault(MS_DOMAIN, 1)
    log.info("%s", report.summary())
    return report


def _reorder_inputs(node: ir.Node, a: ir.Value, order: np.ndarray, name: str) -> ir.Value:
    """``a[..., order]`` before ``node``: an act-order linear's inputs, grouped."""
    indices = ir.Value(
        name=name,
        type=ir.TensorType(ir.DataType.INT64),
        shape=ir.Shape([len(order)]),
        const_value=ir.tensor(order.astype(np.int64), name=name),
    )
    node.graph.register_initializer(indices)
    gather = ir.Node("", "Gather", [a, indices], attributes=[ir.AttrInt64("axis", -1)])
    node.graph.insert_before(node, gather)
    gather.outputs[0].shape, gather.outputs[0].type = a.shape, a.type
    return gather.outputs[0]


class _Packing(LazyPacking):
    """MatMulNBits' B, scales and zero points of one linear, made on the first request."""

    def __init__(self, checkpoint: PrequantizedCheckpoint, linear: _Linear, dtype) -> None:
        super().__init__()
        self.checkpoint, self.linear, self.dtype = checkpoint, linear, dtype
        self._wide: bool | None = None

    def wide_zero_points(self) -> bool:
        """A GPTQ v1 zero point of 15 is 16 once the offset is added: beyond 4 bits, so the zero
        points are stored in float (still exact integers)."""
        if self._wide is None:
            _, zero, _ = self.checkpoint.unpacked(self.linear)
            self._wide = bool((zero > 15).any())
        return self._wide

    def _pack(self) -> None:
        q, zero, scale = self.checkpoint.unpacked(self.linear)
        n, k, block = self.linear.n, self.linear.k, self.linear.block
        if self.linear.order is not None:
            q = q[:, self.linear.order]  # each group's inputs side by side
        q = q.reshape(n, k // block, block)
        self.pending["b"] = np.ascontiguousarray(q[..., 0::2] | (q[..., 1::2] << 4))
        self.pending["scales"] = scale.astype(self.dtype).reshape(-1)
        if self.wide_zero_points():
            self.pending["zero_points"] = zero.astype(self.dtype).reshape(-1)
        else:
            z = zero.astype(np.uint8)
            if z.shape[1] % 2:
                z = np.concatenate([z, np.zeros((n, 1), np.uint8)], axis=1)
            self.pending["zero_points"] = np.ascontiguousarray(
                z[:, 0::2] | (z[:, 1::2] << 4)
            ).reshape(-1)
