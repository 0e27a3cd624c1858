"""Stream safetensors into initializers named by their HF state-dict keys, with a lazy dtype cast."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import onnx_ir as ir
import torch
from torch.export.graph_signature import InputKind

from lowering.dtypes import onnx_dtype
from mobius import failures
from mobius.errors import WeightsError
from mobius.output import direct_io
from mobius.output.saving import nonfinite_sink, scratch
from mobius.sources.key_mapping import KeyMapping
from mobius.sources.safetensors_header import TensorEntry


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
        entry = self.entries[key]
        if entry.offset < 0:
            return self._load_mapped(key)
        tensor = torch.empty(entry.shape, dtype=entry.dtype)
        view = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
        with entry.file.open("rb", buffering=0) as source:
            source.seek(entry.offset)
            if _read_into(source, view) < len(view):
                raise WeightsError(
                    f"{entry.file.name} ended inside tensor '{key}'; re-download or re-save it"
                )
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
    from onnx_ir.tensor_adapters import TorchTensor

    def materialize() -> ir.TensorProtocol:
        data = load().to(dtype).contiguous()
        if data.is_floating_point() and not _all_finite(data):
            _note_nonfinite(name)
        return TorchTensor(data, name=name)

    ir_dtype, ir_shape = onnx_dtype(dtype), ir.Shape(list(shape))
    if copy_from is not None and copy_from.offset >= 0 and _streamable(copy_from.dtype, dtype):
        tensor: ir.LazyTensor = CopiedTensor(materialize, copy_from, dtype, ir_shape, name)
    elif parallel_safe:
        tensor = LoadedTensor(materialize, dtype=ir_dtype, shape=ir_shape, name=name)
    else:
        tensor = ir.LazyTensor(materialize, dtype=ir_dtype, shape=ir_shape, name=name)
    return ir.Value(name=name, type=ir.TensorType(ir_dtype), shape=ir_shape, const_value=tensor)


class LoadedTensor(direct_io.DirectTofile, ir.LazyTensor):
    """An initializer loaded whole from the checkpoint (or kept in memory) when it is written.

    Each call loads afresh and shares nothing, so the package's writer threads may write several
    at once (``ModelPackage`` asks ``parallel_write_safe``)."""

    parallel_write_safe = True


def _will_need(source, offset: int, length: int) -> None:
    """Ask the kernel to start reading ``length`` bytes at ``offset`` now, asynchronously: the whole
    tensor is queued at once instead of one read-ahead window after another."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None and length > 0:
        try:
            advise(source.fileno(), offset, length, os.POSIX_FADV_WILLNEED)
        except OSError:  # a file system that does not take the advice: read as usual
            pass


def _read_into(source, view: memoryview) -> int:
    """Fill ``view`` from ``source`` (retrying short reads); the count read, short only at EOF."""
    done = 0
    while done < len(view):
        got = source.readinto(view[done:])
        if not got:
            break
        done += got
    return done


def _note_nonfinite(name: str) -> None:
    sink = nonfinite_sink()
    if sink is not None:
        sink.append(name)  # ModelPackage.save warns once the model is written


def _streamable(stored: torch.dtype, wanted: torch.dtype) -> bool:
    """Whether a checkpoint tensor can be saved chunk by chunk: the same dtype (bytes copied), or
    a float cast (bf16 -> f16, f32 -> f16, ...), which works element by element."""
    return stored == wanted or (stored.is_floating_point and wanted.is_floating_point)


class CopiedTensor(ir.LazyTensor):
    """A checkpoint tensor saved by streaming its bytes from the safetensors file in chunks.

    safetensors stores little-endian, row-major data, the layout of ONNX external data, so no
    tensor is built: each chunk is read, cast if the output dtype differs, checked for NaN/Inf (after
    the cast: bf16 -> f16 can overflow), and written. Memory stays at about two chunks.
    """

    CHUNK = 16 << 20
    parallel_write_safe = True  # reads its own file handle; no state shared between writes

    def __init__(
        self,
        materialize,
        entry: TensorEntry,
        dtype: torch.dtype,
        shape: ir.Shape,
        name: str,
    ) -> None:
        super().__init__(materialize, dtype=onnx_dtype(dtype), shape=shape, name=name)
        self.source = entry
        self.wanted = dtype  # the output dtype; the entry's own when the bytes are copied
        # the file's bytes are this tensor's (readers such as the quantizer may slice them)
        self.entry = entry if entry.dtype == dtype else None

    def tofile(self, file) -> None:
        entry, wanted = self.source, self.wanted
        floating = wanted.is_floating_point
        item = entry.dtype.itemsize
        remaining = item * math.prod(entry.shape)
        # whole elements per chunk, so a cast never splits one
        buffer = bytearray(min(self.CHUNK // item * item, remaining))
        view = memoryview(buffer)
        finite = True
        out_bytes = remaining // item * wanted.itemsize
        with (
            entry.file.open("rb", buffering=0) as source,
            direct_io.writer(file, out_bytes) as out,
        ):
            _will_need(source, entry.offset, remaining)
            source.seek(entry.offset)
            while remaining:
                want = min(len(buffer), remaining)
                got = _read_into(source, view[:want])
                if got < want:
                    raise WeightsError(
                        f"{entry.file.name} ended inside tensor '{entry.key}'; re-download or re-save it"
                    )
                chunk = torch.frombuffer(view[:got], dtype=entry.dtype)
                if wanted != entry.dtype:
                    chunk = chunk.to(wanted)
                if floating and finite:
                    finite = _all_finite(chunk)
                out.write(view[:got] if wanted == entry.dtype else _bytes_of(chunk))
                remaining -= got
        if not finite:
            _note_nonfinite(self.name)

    # W^T is written in slabs of this many of its rows, each filled block by block (a block of
    # the source and its transpose stay in cache; measured 2.3x less CPU than a cast, then a
    # tiled numpy transpose, on a 8192 x 3072 bf16 -> f16 weight)
    SLAB_COLUMNS = 512
    BLOCK_ROWS = 256

    def write_transposed(self, file) -> bool:
        """Write W^T of this 2-D tensor, cast to the output dtype in the same pass (no
        transposed or cast copy of the whole weight); False, writing nothing, if it is not 2-D."""
        entry = self.source
        if len(entry.shape) != 2:
            return False
        rows, cols = entry.shape
        if rows * cols == 0:
            return True
        view = scratch(entry.dtype.itemsize * rows * cols)
        with entry.file.open("rb", buffering=0) as source_file:
            _will_need(source_file, entry.offset, len(view))
            source_file.seek(entry.offset)
            if _read_into(source_file, view) < len(view):
                raise WeightsError(
                    f"{entry.file.name} ended inside tensor '{entry.key}'; re-download or re-save it"
                )
        source = torch.frombuffer(view, dtype=entry.dtype).reshape(rows, cols)
        slab = torch.empty((min(self.SLAB_COLUMNS, cols), rows), dtype=self.wanted)
        check = self.wanted.is_floating_point
        finite = True
        with direct_io.writer(file, rows * cols * self.wanted.itemsize) as written:
            for start in range(0, cols, self.SLAB_COLUMNS):
                out = slab[: min(self.SLAB_COLUMNS, cols - start)]
                for row in range(0, rows, self.BLOCK_ROWS):
                    block = source[row : row + self.BLOCK_ROWS, start : start + len(out)]
                    out[:, row : row + self.BLOCK_ROWS].copy_(block.t())
                if check and finite:
                    finite = _all_finite(out)
                written.write(_bytes_of(out))
        if not finite:
            _note_nonfinite(self.name)
        return True


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a contiguous CPU tensor, without a copy."""
    return memoryview(tensor.view(torch.uint8).numpy())


def _all_finite(data: torch.Tensor, chunk: int = 1 << 22) -> bool:
    """No NaN or Inf in ``data``.

    A finite sum proves it (IEEE arithmetic carries any NaN or Inf into the sum), and one sum is a
    single fast pass; only a sum that is not finite (NaN/Inf present, or finite values that
    overflow when added) needs the element-wise check, in slices so the temporary mask stays small.
    """
    flat = data.reshape(-1)
    if bool(torch.isfinite(flat.sum())):
        return True
    return all(bool(torch.isfinite(part).all()) for part in flat.split(chunk))


def _check_dtype(key: str, file: Path, stored: torch.dtype, name: str, wanted: torch.dtype) -> None:
    """A float parameter must come from a float tensor (and an integer one from an integer)."""
    if stored.is_floating_point != wanted.is_floating_point:
        kind = "a floating-point" if wanted.is_floating_point else "an integer"
        raise WeightsError(
            f"tensor '{key}' in {file.name} is stored as {str(stored).removeprefix('torch.')} but "
            f"{name} is {kind} tensor; the checkpoint is corrupt or not for this model"
        )


class WeightBinder:
    """Turns each parameter/buffer/constant placeholder of the traced graph into an initializer."""

    def __init__(
        self,
        checkpoint: Checkpoint | None,
        *,
        buffer_values: dict[str, torch.Tensor],
        tied_names: dict[str, list[str]],
        key_to_param: KeyMapping | None,
        constants: dict[str, torch.Tensor],
    ) -> None:
        self.checkpoint = checkpoint
        self.buffer_values = buffer_values
        self.tied_names = tied_names
        self.constants = constants
        self.mapping = key_to_param
        self.param_to_key: dict[str, str] = {}
        # params that transformers builds from several keys: name -> source pattern -> keys
        self.converted: dict[str, dict[str, list[str]]] = {}
        for key in checkpoint.entries if checkpoint is not None else ():
            param, pattern = key_to_param.rename(key) if key_to_param is not None else (key, None)
            if pattern is None:
                self.param_to_key.setdefault(param, key)
            else:
                self.converted.setdefault(param, {}).setdefault(pattern, []).append(key)
        # every parameter a converter fills -> the group (first target) its source keys renamed to
        self.fused: dict[str, str] = {
            target: group
            for group, by_pattern in self.converted.items()
            for target in key_to_param.targets(group, set(by_pattern))
        }
        self.used_keys: set[str] = set()
        self._bound: dict[str, ir.Value] = {}
        # parameter -> its folded value from the loaded weight (mobius.lora.fold: W + B·A·scale)
        self.folds: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
        self.on_fold: Callable[[str], None] = lambda name: None

    def checkpoint_key(self, name: str) -> str | None:
        """The checkpoint key holding parameter ``name`` (through tying and transformers' renamings)."""
        for candidate in self.tied_names.get(name, [name]):
            if candidate in self.param_to_key:
                return self.param_to_key[candidate]
        return None

    def __call__(self, kind: InputKind, name: str, val: torch.Tensor, persistent: bool) -> ir.Value:
        if kind in (InputKind.PARAMETER, InputKind.BUFFER) and persistent:
            key = self.checkpoint_key(name)
            if key is not None:
                return self._from_checkpoint(key, name, val)
            fused = next((c for c in self.tied_names.get(name, [name]) if c in self.fused), None)
            if fused is not None:
                return self._assembled(fused, val)
            if kind == InputKind.PARAMETER and name not in self.buffer_values:
                return self._missing_parameter(name, val)  # (else: computed, not saved)
        return self._from_init(name, val)

    def _from_checkpoint(self, key: str, name: str, val: torch.Tensor) -> ir.Value:
        if key in self._bound:
            return self._bound[key]
        entry = self.checkpoint.entries[key]
        expected = tuple(int(s) for s in val.shape)
        if entry.shape != expected:
            raise WeightsError(
                f"tensor '{key}' in {entry.file.name} has shape {list(entry.shape)} but config.json implies "
                f"{list(expected)} for {name}; the weights and the config do not belong together"
            )
        _check_dtype(key, entry.file, entry.dtype, name, val.dtype)
        checkpoint, fold = self.checkpoint, self.folds.get(name)
        if fold is None:
            value = lazy_initializer(
                key, val.dtype, expected, lambda: checkpoint.load(key), copy_from=entry
            )
        else:  # computed when written, like any other weight; never streamed as the file's bytes
            value = lazy_initializer(key, val.dtype, expected, lambda: fold(checkpoint.load(key)))
            value.const_value.metadata_props["mobius.lora"] = "folded"
            self.on_fold(name)
        value.const_value.metadata_props["mobius.source_key"] = key
        self.used_keys.add(key)
        self._bound[key] = value
        return value

    def _assembled(self, name: str, val: torch.Tensor) -> ir.Value:
        """A parameter made from checkpoint tensors by a converter (stacked experts, a split q/k/v)."""
        if name in self._bound:
            return self._bound[name]
        group = self.fused[name]
        by_pattern = {
            p: sorted(keys, key=_natural_key) for p, keys in self.converted[group].items()
        }
        for key in (k for ks in by_pattern.values() for k in ks):
            entry = self.checkpoint.entries[key]
            _check_dtype(key, entry.file, entry.dtype, name, val.dtype)
        checkpoint, mapping = self.checkpoint, self.mapping
        expected = tuple(int(s) for s in val.shape)

        def assemble(load_key: Callable[[str], torch.Tensor]) -> dict[str, torch.Tensor]:
            tensors = {p: [load_key(k) for k in keys] for p, keys in by_pattern.items()}
            try:
                return mapping.assemble(group, tensors)
            except (RuntimeError, ValueError, IndexError, TypeError) as exc:  # e.g. an expert short
                failures.raise_if_fatal(exc)  # an interrupt torch turned into a TypeError stops
                n = sum(len(keys) for keys in by_pattern.values())
                raise WeightsError(
                    f"cannot assemble '{name}' from its {n} checkpoint tensors "
                    f"({str(exc).splitlines()[0]}); a tensor is missing or has the wrong shape, "
                    "the weights and the config do not belong together"
                ) from None

        # on meta first: shapes that do not fit are refused now, before anything is written
        def on_meta(key: str) -> torch.Tensor:
            entry = checkpoint.entries[key]
            return torch.empty(entry.shape, dtype=entry.dtype, device="meta")

        try:
            shapes = {k: tuple(v.shape) for k, v in assemble(on_meta).items()}
        except WeightsError as exc:
            if "meta" in str(exc.__context__ or exc):  # a converter that needs values: check later
                shapes = {}
            else:
                raise
        if name in shapes and shapes[name] != expected:
            raise WeightsError(
                f"'{name}' assembled to shape {list(shapes[name])}, config.json implies {list(expected)}"
            )

        def load() -> torch.Tensor:
            made = assemble(checkpoint.load)
            if name not in made:
                raise WeightsError(
                    f"could not assemble '{name}' from the checkpoint (converter gave {list(made)})"
                )
            tensor = made[name]
            if tuple(tensor.shape) != expected:
                raise WeightsError(
                    f"'{name}' assembled to shape {list(tensor.shape)}, config.json implies {list(expected)}"
                )
            return tensor

        # transformers' converter objects are shared by every parameter they assemble
        value = lazy_initializer(name, val.dtype, expected, load, parallel_safe=False)
        keys = [k for ks in by_pattern.values() for k in ks]
        value.const_value.metadata_props["mobius.source_keys"] = ",".join(keys)
        self.used_keys.update(keys)
        self._bound[name] = value
        return value

    def _missing_parameter(self, name: str, val: torch.Tensor) -> ir.Value:
        if self.checkpoint is not None:
            raise WeightsError(
                f"the checkpoint has no tensor for parameter '{name}'; it does not match config.json "
                "(or was saved by an incompatible library version)"
            )
        # graph-only build: weights become named graph inputs so the model can still be inspected
        shape = ir.Shape([int(s) for s in val.shape])
        return ir.Value(name=name, type=ir.TensorType(onnx_dtype(val.dtype)), shape=shape)

    def _from_init(self, name: str, val: torch.Tensor) -> ir.Value:
        if name in self._bound:
            return self._bound[name]
        real = self.buffer_values.get(name)
        if real is None:
            real = self.constants.get(name)
        if real is None or real.device.type == "meta":
            raise WeightsError(
                f"'{name}' is created inside forward() and has no value on the meta device; "
                "mobius cannot recover it yet"
            )
        tensor = real.to(val.dtype).contiguous()
        value = lazy_initializer(name, val.dtype, tuple(tensor.shape), lambda: tensor)
        self._bound[name] = value
        return value

    def unused_keys(self) -> list[str]:
        if self.checkpoint is None:
            return []
        return sorted(set(self.checkpoint.entries) - self.used_keys)


def _natural_key(key: str) -> list:
    """Sort 'experts.10' after 'experts.9'."""
    return [int(part) if part.isdigit() else part for part in key.split(".")]
