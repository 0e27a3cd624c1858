"""GGUF files: read and check the header (metadata, tensor infos, data extents) without the data.

``inspect_gguf(path)`` parses what llama.cpp writes (versions 2 and 3, either byte order) and
checks it the way the safetensors headers are checked before tracing: every count and length is
bounded by the file's size, every tensor type is known, and every tensor's data lies inside the
file. Anything else is a ``SourceError`` that names the file and what is wrong. The conversion
(``mobius.gguf.source``, ``mobius.gguf.linears``) starts from the ``GGUFInfo`` this returns.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from mobius.errors import SourceError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_COUNT = 1 << 24  # tensors or metadata entries: far above any real file

# ggml tensor type id -> (name, elements per block, bytes per block)
TENSOR_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}
# ids ggml used once and removed; files holding them need an old llama.cpp
REMOVED_TYPES = {
    4: "Q4_2",
    5: "Q4_3",
    31: "Q4_0_4_4",
    32: "Q4_0_4_8",
    33: "Q4_0_8_8",
    36: "IQ4_NL_4_4",
    37: "IQ4_NL_4_8",
    38: "IQ4_NL_8_8",
}
# known types that no dequantizer reads: intermediate formats of ggml's matmuls (Q8_1, Q8_K),
# never meant to be stored, and types newer than the dequantizers mobius would use (Q1_0)
UNREADABLE_TYPES = {"Q8_1", "Q8_K", "Q1_0"}

# GGUF metadata value type id -> struct format (scalars); 8 is a string, 9 an array
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor's entry in the header; ``shape`` in ggml order (fastest-varying first)."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    type_name: str
    offset: int  # from the start of the data section
    nbytes: int


@dataclass
class GGUFInfo:
    """What a GGUF file's header says."""

    path: Path
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: list[GGUFTensor] = field(default_factory=list)
    data_offset: int = 0

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def tensor_types(self) -> list[str]:
        """The tensor types in the file, most frequent first."""
        counts: dict[str, int] = {}
        for tensor in self.tensors:
            counts[tensor.type_name] = counts.get(tensor.type_name, 0) + 1
        return sorted(counts, key=lambda t: -counts[t])


def is_gguf(path: Path) -> bool:
    """Whether ``path`` is named like a GGUF file or starts with its magic."""
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with path.open("rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def inspect_gguf(path: str | Path) -> GGUFInfo:
    """Parse and check the header of the GGUF file ``path``; ``SourceError`` if it is unusable."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            return _Reader(f, path, size).read()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None


class _Truncated(Exception):
    pass


class _Reader:
    def __init__(self, f: BinaryIO, path: Path, size: int) -> None:
        self.f, self.path, self.size, self.order = f, path, size, "<"

    def fail(self, what: str) -> SourceError:
        return SourceError(f"{self.path.name} is not a valid GGUF file: {what}")

    def read(self) -> GGUFInfo:
        try:
            return self._read()
        except _Truncated:
            raise SourceError(
                f"{self.path.name} is truncated ({self.size} bytes end inside its GGUF header); "
                "download it again"
            ) from None

    def _read(self) -> GGUFInfo:
        if self.bytes(4) != MAGIC:
            raise self.fail("it does not start with the GGUF magic bytes")
        (version,) = struct.unpack("<I", self.bytes(4))
        if (
            version not in VERSIONS
            and struct.unpack(">I", struct.pack("<I", version))[0] in VERSIONS
        ):
            self.order = ">"  # a big-endian file
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version == 1:
            raise self.fail(
                "GGUF version 1 is obsolete; re-create the file with a current llama.cpp"
            )
        if version not in VERSIONS:
            raise self.fail(f"unknown GGUF version {version} (mobius reads 2 and 3)")
        tensor_count, kv_count = self.uint64(), self.uint64()
        for what, count in (("tensor", tensor_count), ("metadata", kv_count)):
            if count > MAX_COUNT:
                raise self.fail(f"its header claims {count} {what} entries")
        info = GGUFInfo(self.path, version)
        for _ in range(kv_count):
            key = self.string()
            info.metadata[key] = self.value(self.uint32(), key)
        alignment = info.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise self.fail(f"general.alignment={alignment!r} is not a power of two")
        infos = [self.tensor_info() for _ in range(tensor_count)]
        info.data_offset = -(-self.f.tell() // alignment) * alignment
        for name, shape, type_id, offset in infos:
            info.tensors.append(self.tensor(name, shape, type_id, offset, alignment, info))
        return info

    def tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self.string()
        n_dims = self.uint32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"tensor {name} has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
        shape = tuple(self.uint64() for _ in range(n_dims))
        return name, shape, self.uint32(), self.uint64()

    def tensor(
        self, name: str, shape: tuple, type_id: int, offset: int, alignment: int, info: GGUFInfo
    ) -> GGUFTensor:
        if type_id in REMOVED_TYPES:
            raise SourceError(
                f"{self.path.name}: tensor {name} has the GGUF quantization type "
                f"{REMOVED_TYPES[type_id]} (id {type_id}), which ggml removed and mobius cannot "
                "read; re-quantize the original checkpoint with a current llama.cpp"
            )
        if type_id not in TENSOR_TYPES:
            raise SourceError(
                f"{self.path.name}: tensor {name} has an unknown GGUF tensor type id {type_id}; "
                "the file is corrupt or newer than mobius: re-create it with a released llama.cpp"
            )
        type_name, block, block_bytes = TENSOR_TYPES[type_id]
        if type_name in UNREADABLE_TYPES:
            raise SourceError(
                f"{self.path.name}: tensor {name} has the GGUF quantization type {type_name}, "
                "which mobius cannot dequantize; use a file quantized as F32, F16, BF16, "
                "Q8_0, Q4_K, ... or the original safetensors checkpoint"
            )
        elements = math.prod(shape)
        if any(d == 0 for d in shape) or shape[0] % block:
            raise self.fail(
                f"tensor {name} has shape {list(shape)}, whose first size is not a multiple of "
                f"{type_name}'s block of {block}"
            )
        nbytes = elements // block * block_bytes
        if offset % alignment:
            raise self.fail(f"tensor {name}'s data offset {offset} is not {alignment}-aligned")
        end = info.data_offset + offset + nbytes
        if end > self.size:
            raise SourceError(
                f"{self.path.name} is truncated: tensor {name} ends at byte {end} but the file "
                f"has {self.size} bytes; download it again"
            )
        return GGUFTensor(name, shape, type_id, type_name, offset, nbytes)

    def value(self, kind: int, key: str) -> Any:
        if kind in _SCALARS:
            fmt = _SCALARS[kind]
            return struct.unpack(self.order + fmt, self.bytes(struct.calcsize(fmt)))[0]
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.uint32(), self.uint64()
            if count > self.size:  # every item takes at least one byte
                raise _Truncated
            if item in _SCALARS:
                fmt = _SCALARS[item]
                data = self.bytes(count * struct.calcsize(fmt))
                return [v[0] for v in struct.iter_unpack(self.order + fmt, data)]
            if item == _ARRAY:
                raise self.fail(f"metadata {key} is an array of arrays")
            return [self.value(item, key) for _ in range(count)]
        raise self.fail(f"metadata {key} has an unknown value type {kind}")

    def string(self) -> str:
        data = self.bytes(self.uint64())
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"a string at byte {self.f.tell() - len(data)} is not UTF-8") from None

    def uint32(self) -> int:
        return struct.unpack(self.order + "I", self.bytes(4))[0]

    def uint64(self) -> int:
        return struct.unpack(self.order + "Q", self.bytes(8))[0]

    def bytes(self, count: int) -> bytes:
        if count > self.size - self.f.tell():
            raise _Truncated
        return self.f.read(count)
