"""Stream safetensors into initializers named by their HF state-dict keys, with a lazy dtype cast.

Importing this module does not import torch, and neither does writing a tensor as it is stored
(bytes copied, or transposed with numpy): a warm build that only copies weights
(``mobius.graph_cache``) never loads torch. A cast, a checkpoint tensor loaded whole, and the
transforms made from one (``Checkpoint.load``) import it when they run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import onnx_ir as ir

from mobius import failures
from mobius.errors import WeightsError
from mobius.output import direct_io
from mobius.output.mapped import mapped_chunks, will_need
from mobius.output.saving import nonfinite_sink, one_kernel_thread, scratch

if TYPE_CHECKING:
    import torch

    from mobius.sources.safetensors_header import TensorEntry


def _torch():
    """torch, imported on first use; within a save, its kernels at one thread
    (``saving.one_kernel_thread``)."""
    import torch

    one_kernel_thread(torch)
    return torch


class Checkpoint:
    """All tensors of a (possibly sharded) safetensors checkpoint, indexed by key; data read on demand."""

    def __init__(self, entries: dict[str, TensorEntry]) -> None:
        self.entries = entries  # read once, from the headers, by mobius.sources.resolve.resolve

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def load(self, key: str) -> torch.Tensor:
        """One tensor, read into a fresh buffer (freed with the tensor).

        A plain read, not a memory map: faulting a map in page by page costs several times the
        CPU of one read, and a map's pages would stay in RSS as long as any handle lived.
        """
        torch = _torch()
        entry = self.entries[key]
        if entry.offset < 0:
            return self._load_mapped(key)
        tensor = torch.empty(entry.shape, dtype=entry.dtype)
        _read_entry(entry, memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
        return tensor

    def _load_mapped(self, key: str) -> torch.Tensor:
        """Through safetensors (for an entry made without its file offset)."""
        from safetensors import safe_open

        entry = self.entries[key]
        try:
            with safe_open(str(entry.file), framework="pt") as handle:
                return handle.get_tensor(key)
        except OSError:
            raise
        except Exception as exc:  # safetensors' own checks (offsets, alignment) on a corrupt file
            failures.raise_if_fatal(exc)
            raise WeightsError(
                f"cannot read tensor '{key}' from {entry.file.name} ({exc}); the file is corrupt, "
                "re-download or re-save it"
            ) from None


def lazy_initializer(
    name: str,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    load: Callable[[], torch.Tensor],
    *,
    copy_from: TensorEntry | None = None,
    parallel_safe: bool = True,
) -> ir.Value:
    """An initializer whose bytes are produced only when the model is saved.

    With ``copy_from`` (a checkpoint tensor in ``dtype``, or in another float type) saving streams
    the tensor from the file in chunks, cast chunk by chunk, instead of building it whole.
    ``parallel_safe=False``: ``load`` may share state with other loads (a transformers converter),
    so the package is written by one thread.
    """
    from lowering.dtypes import onnx_dtype

    ir_dtype, ir_shape = onnx_dtype(dtype), ir.Shape(list(shape))

    stored = copy_from is not None and copy_from.offset >= 0 and copy_from.ir_dtype == ir_dtype

    def materialize() -> ir.TensorProtocol:
        if stored:  # the file's bytes as they are (small tensors are written inline this way)
            return _as_stored(copy_from, name)
        from onnx_ir.tensor_adapters import TorchTensor

        from lowering.dtypes import torch_dtype

        data = load().to(torch_dtype(ir_dtype)).contiguous()
        if data.is_floating_point() and not _all_finite(data):
            _note_nonfinite(name)
        return TorchTensor(data, name=name)

    if copy_from is not None and copy_from.offset >= 0 and _streamable(copy_from, ir_dtype):
        tensor: ir.LazyTensor = CopiedTensor(materialize, copy_from, ir_dtype, ir_shape, name)
    elif parallel_safe:
        tensor = LoadedTensor(materialize, dtype=ir_dtype, shape=ir_shape, name=name)
    else:
        tensor = ir.LazyTensor(materialize, dtype=ir_dtype, shape=ir_shape, name=name)
    return ir.Value(name=name, type=ir.TensorType(ir_dtype), shape=ir_shape, const_value=tensor)


def _as_stored(entry: TensorEntry, name: str) -> ir.Tensor:
    """``entry``'s tensor, read into memory of its own with numpy."""
    data = bytearray(entry.itemsize * math.prod(entry.shape))
    _read_entry(entry, memoryview(data))
    array = np.frombuffer(data, dtype=entry.numpy_dtype).reshape(entry.shape)
    if entry.is_floating_point and not _finite(array):
        _note_nonfinite(name)
    return ir.Tensor(array, dtype=entry.ir_dtype, name=name)


def held_initializer(name: str, array: np.ndarray, dtype: ir.DataType) -> ir.Value:
    """An initializer of a value already in memory (a buffer computed at init, a constant),
    held as numpy and checked for NaN/Inf when written."""

    def materialize() -> ir.TensorProtocol:
        if dtype.is_floating_point() and not _finite(array):
            _note_nonfinite(name)
        return ir.Tensor(array, dtype=dtype, name=name)

    shape = ir.Shape(list(array.shape))
    tensor = LoadedTensor(materialize, dtype=dtype, shape=shape, name=name)
    return ir.Value(name=name, type=ir.TensorType(dtype), shape=shape, const_value=tensor)


class LoadedTensor(direct_io.DirectTofile, ir.LazyTensor):
    """An initializer loaded whole from the checkpoint (or kept in memory) when it is written.

    Each call loads afresh and shares nothing, so the package's writer threads may write several
    at once (``ModelPackage`` asks ``parallel_write_safe``)."""

    parallel_write_safe = True


def _read_into(source, view: memoryview) -> int:
    """Fill ``view`` from ``source`` (retrying short reads); the count read, short only at EOF."""
    done = 0
    while done < len(view):
        got = source.readinto(view[done:])
        if not got:
            break
        done += got
    return done


def _read_entry(entry: TensorEntry, view: memoryview) -> None:
    """Fill ``view`` (``entry``'s size) with ``entry``'s bytes; a WeightsError if the file ends
    first."""
    with entry.file.open("rb", buffering=0) as source:
        will_need(source, entry.offset, len(view))
        source.seek(entry.offset)
        if _read_into(source, view) < len(view):
            raise WeightsError(
                f"{entry.file.name} ended inside tensor '{entry.key}'; re-download or re-save it"
            )


def _note_nonfinite(name: str) -> None:
    sink = nonfinite_sink()
    if sink is not None:
        sink.append(name)  # ModelPackage.save warns once the model is written


def _streamable(entry: TensorEntry, wanted: ir.DataType) -> bool:
    """Whether a checkpoint tensor can be saved chunk by chunk: the same dtype (bytes copied), or
    a float cast (bf16 -> f16, f32 -> f16, ...), which works element by element."""
    return entry.ir_dtype == wanted or (entry.is_floating_point and wanted.is_floating_point())


class CopiedTensor(ir.LazyTensor):
    """A checkpoint tensor saved by streaming its bytes from the safetensors file in chunks.

    safetensors stores little-endian, row-major data, the layout of ONNX external data, so no
    tensor is built: each chunk is read, cast if the output dtype differs, checked for NaN/Inf (after
    the cast: bf16 -> f16 can overflow), and written. Memory stays at about two chunks. Bytes
    written as stored need numpy only; a cast runs in torch (fused, and faster than numpy's
    bfloat16 casts).
    """

    CHUNK = 16 << 20
    parallel_write_safe = True  # reads its own file handle; no state shared between writes

    def __init__(
        self,
        materialize,
        entry: TensorEntry,
        dtype: ir.DataType,
        shape: ir.Shape,
        name: str,
    ) -> None:
        super().__init__(materialize, dtype=dtype, shape=shape, name=name)
        self.source = entry
        # the file's bytes are this tensor's (readers such as the quantizer may slice them)
        self.entry = entry if entry.ir_dtype == dtype else None

    def _cast(self) -> Callable[[memoryview], tuple[memoryview, bool]] | None:
        """chunk bytes -> (the chunk cast to this tensor's dtype, all finite); None: no cast."""
        if self.entry is not None:
            return None
        torch = _torch()
        from lowering.dtypes import torch_dtype

        stored, wanted = self.source.dtype, torch_dtype(self.dtype)
        check = self.dtype.is_floating_point()
        size = int(self.dtype.itemsize)  # float types: whole bytes
        halves = stored == torch.bfloat16 and wanted == torch.float16

        def cast(chunk: memoryview) -> tuple[memoryview, bool]:
            # into this thread's reused buffer: a fresh tensor per chunk cost 0.5 ns an element
            # in page faults (1.6 against 1.0 ns for bf16 -> f16 with the NaN/Inf check)
            source = torch.frombuffer(chunk, dtype=stored)
            data = torch.frombuffer(scratch(source.numel() * size, "cast"), dtype=wanted)
            if halves:
                _cast_halves(source, data)
            else:
                data.copy_(source)
            return _bytes_of(data), not check or _all_finite(data)

        return cast

    def tofile(self, file) -> None:
        entry = self.source
        item = entry.itemsize
        remaining = item * math.prod(entry.shape)
        finite, cast = True, self._cast()
        out_bytes = remaining // item * self.dtype.itemsize
        # whole elements per chunk, so a cast never splits one
        chunks = mapped_chunks(entry, remaining, self.CHUNK // item * item)
        with direct_io.writer(file, out_bytes) as out:
            for chunk in chunks:
                if cast is None:
                    if finite and entry.is_floating_point:
                        finite = _finite(np.frombuffer(chunk, dtype=entry.numpy_dtype))
                    out.write(chunk)
                else:
                    data, chunk_finite = cast(chunk)
                    finite = finite and chunk_finite
                    out.write(data)
                del chunk  # the next chunk unmaps this one
        if not finite:
            _note_nonfinite(self.name)

    # W^T cast is written in slabs of this many of its rows, each filled by blocks of BLOCK_ROWS
    # source rows (a block of the source and its transpose stay in cache: 2.3x less CPU than a
    # cast, then a tiled numpy transpose). Few rows per block keep power-of-two row strides out of
    # each other's cache sets: the bf16 -> f16 cast of Llama-3.1-8B's linears took 10.7 CPU s in
    # blocks of 64 x 2048 against 21.2 in blocks of 256 x 512 (3.98 against 1.66 ns per element
    # on a 14336 x 4096 weight; lowering.transposed has the same for plain transposes).
    SLAB_COLUMNS = 2048
    BLOCK_ROWS = 64

    def write_transposed(self, file) -> bool:
        """Write W^T of this 2-D tensor, cast to the output dtype in the same pass (no
        transposed or cast copy of the whole weight); False, writing nothing, if it is not 2-D."""
        entry = self.source
        if len(entry.shape) != 2:
            return False
        rows, cols = entry.shape
        if rows * cols == 0:
            return True
        view = scratch(entry.itemsize * rows * cols)
        _read_entry(entry, view)
        if self.entry is None:
            finite = self._write_cast_transposed(view, file)
        else:
            finite = self._write_stored_transposed(view, file)
        if not finite:
            _note_nonfinite(self.name)
        return True

    def _write_stored_transposed(self, view: memoryview, file) -> bool:
        """W^T in the stored dtype, by numpy tiles; whether every value is finite."""
        from lowering.transposed import transposed_slabs

        entry = self.source
        rows, cols = entry.shape
        source = np.frombuffer(view, dtype=entry.numpy_dtype).reshape(rows, cols)
        finite, check = True, entry.is_floating_point
        with direct_io.writer(file, rows * cols * entry.itemsize) as written:
            for slab in transposed_slabs(source, buffer=lambda n: scratch(n, "slab")):
                if check and finite:
                    finite = _finite(slab)
                written.write(slab.reshape(-1).view(np.uint8))
        return finite

    def _write_cast_transposed(self, view: memoryview, file) -> bool:
        """W^T cast to this tensor's dtype in the same pass (torch's blocked copy); whether every
        value is finite."""
        torch = _torch()
        from lowering.dtypes import torch_dtype

        entry, wanted = self.source, torch_dtype(self.dtype)
        rows, cols = entry.shape
        source = torch.frombuffer(view, dtype=entry.dtype).reshape(rows, cols)
        slab_rows = min(self.SLAB_COLUMNS, cols)
        slab_bytes = scratch(slab_rows * rows * wanted.itemsize, "slab")
        slab = torch.frombuffer(slab_bytes, dtype=wanted).reshape(slab_rows, rows)
        finite, check = True, wanted.is_floating_point
        with direct_io.writer(file, rows * cols * self.dtype.itemsize) as written:
            for start in range(0, cols, self.SLAB_COLUMNS):
                out = slab[: min(self.SLAB_COLUMNS, cols - start)]
                for row in range(0, rows, self.BLOCK_ROWS):
                    block = source[row : row + self.BLOCK_ROWS, start : start + len(out)]
                    out[:, row : row + self.BLOCK_ROWS].copy_(block.t())
                if check and finite:
                    finite = _all_finite(out)
                written.write(_bytes_of(out))
        return finite


# elements per block of a bf16 -> f16 cast (its float32 copy stays in cache)
HALF_CAST_BLOCK = 1 << 16


def _cast_halves(source: torch.Tensor, out: torch.Tensor) -> None:
    """``out.copy_(source)`` for bf16 -> f16, through float32 one cache-sized block at a time
    (the same bits: both round the float32 value): torch's direct copy converts element by
    element (0.8 ns an element), its copies to and from float32 are vectorised (0.35 ns for both,
    in blocks)."""
    torch = _torch()
    wide = torch.frombuffer(scratch(HALF_CAST_BLOCK * 4, "cast_f32"), dtype=torch.float32)
    total = source.numel()
    for start in range(0, total, HALF_CAST_BLOCK):
        stop = min(start + HALF_CAST_BLOCK, total)
        block = wide[: stop - start]
        block.copy_(source[start:stop])
        out[start:stop].copy_(block)


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a contiguous CPU tensor, without a copy."""
    return memoryview(tensor.view(_torch().uint8).numpy())


def _all_finite(data: torch.Tensor, chunk: int = 1 << 22) -> bool:
    """No NaN or Inf in ``data``.

    A finite sum proves it (IEEE arithmetic carries any NaN or Inf into the sum), and one sum is a
    single fast pass; only a sum that is not finite (NaN/Inf present, or finite values that
    overflow when added) needs the element-wise check, in slices so the temporary mask stays small.
    """
    torch = _torch()
    flat = data.reshape(-1)
    if bool(torch.isfinite(flat.sum())):
        return True
    return all(bool(torch.isfinite(part).all()) for part in flat.split(chunk))


# the bits of each numpy float type's exponent: all set is NaN or Inf
_EXPONENT_BITS = {2: (np.uint16, 0x7F80)}  # bfloat16 (numpy's float16 is checked by its sum)


def _finite(array: np.ndarray, chunk: int = 1 << 22) -> bool:
    """``_all_finite`` for a numpy array: a finite sum, else the element-wise check; bfloat16
    (ml_dtypes, whose sums are slow) by its exponent bits."""
    flat = array.reshape(-1)
    if flat.dtype.kind != "f":  # ml_dtypes' bfloat16
        unsigned, mask = _EXPONENT_BITS[flat.dtype.itemsize]
        bits = flat.view(unsigned)
        return not any(
            bool(((bits[i : i + chunk] & mask) == mask).any()) for i in range(0, len(bits), chunk)
        )
    with np.errstate(all="ignore"):
        if bool(np.isfinite(flat.sum())):
            return True
        return all(bool(np.isfinite(flat[i : i + chunk]).all()) for i in range(0, len(flat), chunk))
