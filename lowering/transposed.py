"""A lazily transposed 2-D initializer, transposed block by block (cache friendly) as it is written."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import onnx_ir as ir

# W^T is filled block by block: a block of BLOCK_ROWS source rows by SLAB_ROWS source columns,
# whose transpose is a slab of SLAB_ROWS rows. Few source rows per block keep the rows a block
# touches out of each other's cache sets when the row stride is a power of two (4096 columns): tiles
# of 256 x 256 ran at 5.5-6.7 ns per float32 element on a 4096 x 4096 weight, blocks of 64 x 256 at
# 1.7 (1.4 against 6.1 at 14336 x 4096); on Qwen2.5-0.5B's shapes blocks of 64 x 256 take 0.5-1.3 ns against 0.8-1.7 in tiles.
BLOCK_ROWS = 64
SLAB_ROWS = 256


def transposed_slabs(
    source: np.ndarray,
    rows_per_slab: int = SLAB_ROWS,
    buffer: Callable[[int], memoryview] | None = None,
) -> Iterator[np.ndarray]:
    """The rows of ``source.T``, ``rows_per_slab`` at a time, each slab contiguous. With
    ``buffer`` (bytes -> a writable buffer), every slab is made in the buffer it gives, valid
    until the next slab is asked for."""
    rows, cols = source.shape
    for start in range(0, cols, rows_per_slab):
        stop = min(start + rows_per_slab, cols)
        shape = (stop - start, rows)
        if buffer is None:
            slab = np.empty(shape, dtype=source.dtype)
        else:
            nbytes = shape[0] * rows * source.dtype.itemsize
            slab = np.frombuffer(buffer(nbytes), dtype=source.dtype).reshape(shape)
        for r in range(0, rows, BLOCK_ROWS):
            slab[:, r : r + BLOCK_ROWS] = source[r : r + BLOCK_ROWS, start:stop].T
        yield slab


def transpose(source: np.ndarray) -> np.ndarray:
    """``np.ascontiguousarray(source.T)`` for a 2-D array, computed tile by tile."""
    if source.ndim != 2:
        return np.ascontiguousarray(source.T)
    out = np.empty(source.shape[::-1], dtype=source.dtype)
    row = 0
    for slab in transposed_slabs(source):
        out[row : row + len(slab)] = slab
        row += len(slab)
    return out


def _plain(tensor: ir.TensorProtocol) -> bool:
    """An in-memory tensor (its bytes fixed, nothing computed when written)."""
    from onnx_ir.tensor_adapters import TorchTensor

    return type(tensor) in (ir.Tensor, TorchTensor)


class DerivedTensor(ir.LazyTensor):
    """A tensor computed from one source initializer when it is written (a transpose, a QR).

    The source is kept as ``source_tensor``, not in LazyTensor's ``_tensor`` slot: that caches a
    materialized value, and a graph-cache recipe drops it (a warm build then lost the source: a
    slow, single-thread write)."""

    def __init__(
        self, source: ir.TensorProtocol, dtype: ir.DataType, shape: list[int], name: str
    ) -> None:
        super().__init__(self._materialize, dtype=dtype, shape=ir.Shape(shape), name=name)
        self.source_tensor = source

    @property
    def parallel_write_safe(self) -> bool:
        """Whether writer threads may write this while writing others: when its source may."""
        source = self.source_tensor
        return getattr(source, "parallel_write_safe", False) or _plain(source)

    def _materialize(self) -> ir.TensorProtocol:
        raise NotImplementedError


class TransposedTensor(DerivedTensor):
    """W^T of a 2-D tensor, made only when needed; ``tofile`` streams it slab by slab, so writing
    holds one slab of the transpose in memory, not a second copy of the whole weight."""

    def __init__(self, source: ir.TensorProtocol, name: str) -> None:
        rows, cols = (int(d) for d in source.shape)
        super().__init__(source, source.dtype, [cols, rows], name)
        self._source: Callable[[], np.ndarray] = source.numpy

    def _materialize(self) -> ir.TensorProtocol:
        return ir.tensor(transpose(self._source()))

    def tofile(self, file) -> None:
        # a checkpoint tensor streamed by mobius.output.weights: cast and transposed in one pass
        write = getattr(self.source_tensor, "write_transposed", None)
        if write is not None and write(file):
            return
        source = self._source()
        if source.ndim != 2 or source.dtype.itemsize * 8 != self.dtype.bitwidth:
            super().tofile(file)  # packed sub-byte types: let onnx_ir lay the bytes out
            return
        for slab in transposed_slabs(source):
            file.write(slab.reshape(-1).view(np.uint8))
