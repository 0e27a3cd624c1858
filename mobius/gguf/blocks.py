"""GGUF quantized blocks read as ``MatMulNBits`` blocks: codes, a scale and a zero point per block.

``MatMulNBits`` dequantizes ``w = (q - zero_point) * scale`` per block of ``block_size`` weights
along K, the axis ggml quantizes along too. Each ggml type below is one small decoder from a row
slab of raw blocks (uint8 ``[rows, row_bytes]``) to :class:`Blocks`:

- ``Q4_0`` ``(q - 8) * d``, ``Q8_0`` ``q * d`` (int8, stored as ``q + 128``), ``Q5_0``
  ``(q - 16) * d`` and ``Q6_K`` ``(q - 32) * d * sc`` (16-weight sub-blocks) have an integer zero
  point: the values MatMulNBits computes are bit-identical to ggml's (the scales are exact float32
  products of a float16 and a small integer).
- ``Q4_1`` ``q * d + m`` and ``Q4_K`` ``q * d * sc - dmin * mn`` have a float offset, which is an
  integer multiple of the scale only by chance: they become 4-bit blocks with *float* zero points
  ``-m / d`` (MatMulNBits accepts zero points in the scales' type for 4 bits), equal to ggml's
  values up to float32 rounding (a few ulp), not bit for bit.
- ``Q5_1`` and ``Q5_K`` would need 8-bit codes with float zero points, which onnxruntime's CPU
  kernel refuses; they, and every other type (Q2_K, Q3_K, the IQ types), are dequantized.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

QK_K = 256


@dataclass
class Blocks:
    """One row slab as MatMulNBits blocks: ``codes`` uint8 ``[rows, k_blocks, block_size]``,
    ``scales`` float32 ``[rows, k_blocks]``, ``zero_points`` ``[rows, k_blocks]`` (uint8, or
    float32 for a layout with float zero points)."""

    codes: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray


@dataclass(frozen=True)
class Layout:
    """How one ggml type maps: code ``bits``, MatMulNBits ``block_size``, whether zero points are
    float (values equal up to rounding) or integer (bit-exact), ggml's block geometry, and the
    decoder."""

    bits: int
    block_size: int
    float_zero_points: bool
    ggml_block: int  # weights per ggml block
    ggml_bytes: int  # bytes per ggml block
    decode: Callable[[np.ndarray], Blocks]

    @property
    def exact(self) -> bool:
        return not self.float_zero_points

    def describe(self) -> str:
        zero = (
            "float zero points (equal up to float32 rounding)"
            if self.float_zero_points
            else ("integer zero points (bit-exact)")
        )
        return f"MatMulNBits {self.bits}-bit, block {self.block_size}, {zero}"


def _f16(raw: np.ndarray, start: int) -> np.ndarray:
    """The float16 at byte ``start`` of each block, as float32 ``[rows, blocks]``."""
    return (
        np.ascontiguousarray(raw[..., start : start + 2])
        .view(np.float16)[..., 0]
        .astype(np.float32)
    )


def _nibbles_split(qs: np.ndarray) -> np.ndarray:
    """ggml's 32-weight nibble layout: byte j holds weight j (low) and weight j + 16 (high)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _full(shape: tuple[int, ...], value: int) -> np.ndarray:
    return np.full(shape, value, dtype=np.uint8)


def _float_offset(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> Blocks:
    """Blocks worth ``codes * scale + offset``: zero point ``-offset / scale``. A block whose scale
    is 0 holds ``offset`` everywhere: codes 0, zero point 1 and scale ``-offset``."""
    empty = scale == 0
    safe = np.where(empty, np.float32(1), scale)
    zero = np.where(empty, np.float32(1), -offset / safe).astype(np.float32)
    if empty.any():
        codes = np.where(empty[..., None], np.uint8(0), codes)
    scale = np.where(empty, -offset, scale).astype(np.float32)
    return Blocks(codes.astype(np.uint8), scale, zero)


def decode_q4_0(raw: np.ndarray) -> Blocks:
    d = _f16(raw, 0)
    return Blocks(_nibbles_split(raw[..., 2:18]), d, _full(d.shape, 8))


def decode_q4_1(raw: np.ndarray) -> Blocks:
    return _float_offset(_nibbles_split(raw[..., 4:20]), _f16(raw, 0), _f16(raw, 2))


def decode_q5_0(raw: np.ndarray) -> Blocks:
    d = _f16(raw, 0)
    high = np.ascontiguousarray(raw[..., 2:6]).view("<u4")  # bit j: the fifth bit of weight j
    bits = (high >> np.arange(32, dtype=np.uint32)) & 1
    codes = _nibbles_split(raw[..., 6:22]) | (bits.astype(np.uint8) << 4)
    return Blocks(codes, d, _full(d.shape, 16))


def decode_q8_0(raw: np.ndarray) -> Blocks:
    d = _f16(raw, 0)
    codes = (np.ascontiguousarray(raw[..., 2:34]).view(np.int8).astype(np.int16) + 128).astype(
        np.uint8
    )
    return Blocks(codes, d, _full(d.shape, 128))


def _k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's twelve bytes -> eight 6-bit scales and eight 6-bit mins per super-block."""
    from gguf.quants import Q4_K

    shape = packed.shape[:-1]
    sc, mn = Q4_K.get_scale_min(np.ascontiguousarray(packed).reshape(-1, 12))
    return sc.reshape(*shape, 8), mn.reshape(*shape, 8)


def decode_q4_k(raw: np.ndarray) -> Blocks:
    rows, supers = raw.shape[:2]
    d, dmin = _f16(raw, 0)[..., None], _f16(raw, 2)[..., None]
    sc, mn = _k_scales(raw[..., 4:16])
    # 4 chunks of 32 bytes: low nibbles are sub-block 2c, high nibbles sub-block 2c + 1
    qs = raw[..., 16:144].reshape(rows, supers, 4, 1, 32)
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=3).reshape(rows, supers * 8, 32)
    scale = (d * sc.astype(np.float32)).reshape(rows, supers * 8)
    offset = -(dmin * mn.astype(np.float32)).reshape(rows, supers * 8)
    return _float_offset(codes, scale, offset)


def decode_q6_k(raw: np.ndarray) -> Blocks:
    rows, supers = raw.shape[:2]
    ql = raw[..., 0:128].reshape(rows, supers, 2, 2, 32)  # [half, first/second 32 bytes, l]
    qh = raw[..., 128:192].reshape(rows, supers, 2, 1, 32)
    sc = np.ascontiguousarray(raw[..., 192:208]).view(np.int8).astype(np.float32)
    d = _f16(raw, 208)[..., None]
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=3)  # quarters 0..3 of each half
    high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(4, 1)) & 3
    codes = (low | (high << 4)).reshape(rows, supers * 16, 16)
    scale = (d * sc).reshape(rows, supers * 16)
    return Blocks(codes, scale, _full(scale.shape, 32))


LAYOUTS: dict[str, Layout] = {
    "Q4_0": Layout(4, 32, False, 32, 18, decode_q4_0),
    "Q4_1": Layout(4, 32, True, 32, 20, decode_q4_1),
    "Q5_0": Layout(8, 32, False, 32, 22, decode_q5_0),
    "Q8_0": Layout(8, 32, False, 32, 34, decode_q8_0),
    "Q4_K": Layout(4, 32, True, QK_K, 144, decode_q4_k),
    "Q6_K": Layout(8, 16, False, QK_K, 210, decode_q6_k),
}
# why a type with a reader is dequantized instead
DEQUANTIZED_BECAUSE = {
    "Q5_1": "8-bit codes with float zero points (onnxruntime's CPU MatMulNBits refuses them)",
    "Q5_K": "8-bit codes with float zero points (onnxruntime's CPU MatMulNBits refuses them)",
    "Q2_K": "2-bit codes with 4-bit sub-block scales: not mapped yet",
    "Q3_K": "3-bit codes with 6-bit signed sub-block scales: not mapped yet",
}
FLOAT_TYPES = ("F32", "F16", "BF16", "F64")


def decode_rows(raw: np.ndarray, layout: Layout) -> Blocks:
    """Decode a slab of rows (uint8 ``[rows, row_bytes]``) of one tensor."""
    rows = raw.shape[0]
    return layout.decode(raw.reshape(rows, -1, layout.ggml_bytes))


def dequantize(blocks: Blocks) -> np.ndarray:
    """The float32 ``[rows, K]`` values MatMulNBits computes from ``blocks`` (for tests, reports)."""
    q = blocks.codes.astype(np.float32) - blocks.zero_points.astype(np.float32)[..., None]
    return (q * blocks.scales[..., None]).reshape(blocks.codes.shape[0], -1)
