"""Round-to-nearest block quantization of a [N, K] weight into the layout of ``MatMulNBits``.

``com.microsoft`` ``MatMulNBits`` computes ``A @ dequant(B)^T`` where, for output row ``n`` and
block ``b`` (``block_size`` consecutive K elements), ``w = (q - zero_point) * scale``:

- ``B``: uint8 ``[N, k_blocks, block_size * bits / 8]``, ``k_blocks = ceil(K / block_size)``; the
  last block is zero-padded; 4-bit codes are packed two per byte, the even K index in the low nibble;
- ``scales``: ``[N * k_blocks]`` in the activation's dtype;
- ``zero_points``: uint8 ``[N * ceil(k_blocks * bits / 8)]``, 4-bit ones packed two per byte per
  row (low nibble first, the row padded to whole bytes); absent means ``2 ** (bits - 1)``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from mobius.output.direct_io import DirectTofile


@dataclass(frozen=True)
class Scheme:
    """How weights are quantized: ``bits`` (4 or 8), ``block_size`` (a power of two, >= 16),
    ``symmetric`` (no zero points stored) and the kernel's ``accuracy_level`` (0 to 4)."""

    bits: int = 4
    block_size: int = 32
    symmetric: bool = False
    accuracy_level: int = 0

    @property
    def name(self) -> str:
        return f"int{self.bits}"

    def blocks(self, k: int) -> int:
        return -(-k // self.block_size)


@dataclass
class Packed:
    """One weight in MatMulNBits form; ``zero_points`` is None for a symmetric scheme."""

    b: np.ndarray  # uint8 [N, k_blocks, blob]
    scales: np.ndarray  # [N * k_blocks], the weight's float dtype
    zero_points: np.ndarray | None  # uint8 [N * ceil(k_blocks * bits / 8)]


def quantize(weight: np.ndarray, scheme: Scheme) -> Packed:
    """Quantize ``weight`` ([N, K], float) to nearest, block by block along K."""
    n, k = weight.shape
    kb, bs = scheme.blocks(k), scheme.block_size
    if k % bs == 0:  # whole blocks: a view of the weight, no padded copy
        w = weight.astype(np.float32, copy=False).reshape(n, kb, bs)
    else:
        w = np.zeros((n, kb * bs), dtype=np.float32)
        w[:, :k] = weight
        w = w.reshape(n, kb, bs)
    qmax = (1 << scheme.bits) - 1
    if scheme.symmetric:
        zero = float(1 << (scheme.bits - 1))
        scale = np.abs(w).max(axis=-1) / np.float32(zero - 1)
        zp = np.full(scale.shape, zero, dtype=np.float32)
    else:
        low = np.minimum(w.min(axis=-1), 0)
        high = np.maximum(w.max(axis=-1), 0)
        scale = (high - low) / np.float32(qmax)
        safe = np.where(scale == 0, np.float32(1), scale)
        zp = np.clip(np.round(-low / safe), 0, qmax)
    # the scale the kernel reads is the one stored (a float16 model stores float16 scales)
    stored = scale.astype(weight.dtype)
    used = stored.astype(np.float32)
    safe = np.where(used == 0, np.float32(1), used)
    # one temporary, rounded, shifted and clipped in place: w / scale + zero in [0, qmax]
    t = np.divide(w, safe[..., None])
    np.round(t, out=t)
    t += zp[..., None]
    np.clip(t, 0, qmax, out=t)
    q = t.astype(np.uint8)
    if scheme.bits == 4:
        b = q[..., 0::2] | (q[..., 1::2] << 4)
    else:
        b = q
    zero_points = None
    if not scheme.symmetric:
        z = zp.astype(np.uint8)
        if scheme.bits == 4:
            if kb % 2:
                z = np.concatenate([z, np.zeros((n, 1), np.uint8)], axis=1)
            z = z[:, 0::2] | (z[:, 1::2] << 4)
        zero_points = np.ascontiguousarray(z).reshape(-1)
    return Packed(np.ascontiguousarray(b), stored.reshape(-1), zero_points)


def quantize_rows(slabs: Iterable[np.ndarray], shape: tuple[int, int], scheme: Scheme) -> Packed:
    """``quantize`` over consecutive row slabs of one ``shape`` ([N, K]) weight, each slab's result
    written into place (every part is laid out row by row): memory stays the result plus one slab's
    temporaries."""
    n, k = shape
    kb = scheme.blocks(k)
    b = np.empty((n, kb, scheme.block_size * scheme.bits // 8), dtype=np.uint8)
    scales: np.ndarray | None = None
    zp_row = -(-kb * scheme.bits // 8)
    zero_points = None if scheme.symmetric else np.empty(n * zp_row, dtype=np.uint8)
    row = 0
    for slab in slabs:
        part = quantize(slab, scheme)
        rows = len(slab)
        if scales is None:
            scales = np.empty(n * kb, dtype=part.scales.dtype)
        b[row : row + rows] = part.b
        scales[row * kb : (row + rows) * kb] = part.scales
        if zero_points is not None:
            zero_points[row * zp_row : (row + rows) * zp_row] = part.zero_points
        row += rows
    if row != n or scales is None:
        raise ValueError(f"slabs held {row} rows, the weight has {n}")
    return Packed(b, scales, zero_points)


class LazyPacking:
    """MatMulNBits' parts of one weight (``b``, ``scales``, ``zero_points``), all made by
    ``_pack`` on the first request for any of them; each part is handed out once and then
    dropped, so nothing stays in memory after they are written.

    ``reads``: the tensors ``_pack`` materializes (none: it opens its own file handles). The parts
    may be written by several threads at once when those may (the packing itself runs under a
    lock, so two threads asking for parts of one weight pack it once).
    """

    def __init__(self, reads: Iterable[ir.TensorProtocol | None] = ()) -> None:
        from mobius.output.package import writes_alongside

        self.pending: dict[str, np.ndarray] = {}
        self.parallel_safe = all(writes_alongside(t) for t in reads)
        self._lock = threading.Lock()

    def _pack(self) -> None:
        raise NotImplementedError

    def getter(self, part: str, name: str) -> Callable[[], ir.TensorProtocol]:
        def get() -> ir.TensorProtocol:
            with self._lock:
                if part not in self.pending:
                    self._pack()
                return ir.Tensor(self.pending.pop(part), name=name)

        return get

    def part(self, part: str, name: str, dtype: ir.DataType, shape: Sequence[int]) -> PackedPart:
        """The lazy initializer of ``part``, made by this packing when it is saved."""
        return PackedPart(self, part, name, dtype, shape)


class PackedPart(DirectTofile, ir.LazyTensor):
    """One part of a ``LazyPacking``: written alongside other initializers when its packing may."""

    def __init__(
        self, packing: LazyPacking, part: str, name: str, dtype: ir.DataType, shape: Sequence[int]
    ) -> None:
        super().__init__(packing.getter(part, name), dtype=dtype, shape=ir.Shape(shape), name=name)
        self.packing = packing

    @property
    def parallel_write_safe(self) -> bool:
        return self.packing.parallel_safe
