"""Read a safetensors file's header (names, dtypes, shapes, offsets) without its data, with the
checks a corrupt or mismatched checkpoint fails; and the layer count its keys imply."""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mobius.errors import WeightsError

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir
    import torch

# the dtypes mobius reads, by their safetensors names: (the name torch and numpy give it, its
# bytes, its ONNX name)
SAFETENSORS_DTYPES: dict[str, tuple[str, int, str]] = {
    "F64": ("float64", 8, "DOUBLE"),
    "F32": ("float32", 4, "FLOAT"),
    "F16": ("float16", 2, "FLOAT16"),
    "BF16": ("bfloat16", 2, "BFLOAT16"),
    "I64": ("int64", 8, "INT64"),
    "I32": ("int32", 4, "INT32"),
    "I16": ("int16", 2, "INT16"),
    "I8": ("int8", 1, "INT8"),
    "U8": ("uint8", 1, "UINT8"),
    "BOOL": ("bool", 1, "BOOL"),
}
MAX_HEADER_BYTES = 100 * 1024 * 1024


def stored_name(dtype: torch.dtype) -> str:
    """The safetensors name of a torch dtype (``torch.bfloat16`` -> ``BF16``)."""
    name = str(dtype).removeprefix("torch.")
    for stored, (readable, _, _) in SAFETENSORS_DTYPES.items():
        if readable == name:
            return stored
    raise WeightsError(f"mobius cannot store tensors of dtype {name}")


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives in a safetensors file, read from the header alone.

    Its dtype is kept as the header names it (``stored``), so that reading the headers and
    writing tensors as they are stored never import torch; ``dtype`` is the torch dtype, for the
    transforms that need torch."""

    key: str
    file: Path
    stored: str  # the safetensors dtype name: "F32", "BF16", ...
    shape: tuple[int, ...]
    offset: int = -1  # of the first data byte in the file; -1: unknown

    @property
    def dtype_name(self) -> str:
        """The dtype as torch and numpy name it: ``float32``, ``bfloat16``, ..."""
        return SAFETENSORS_DTYPES[self.stored][0]

    @property
    def itemsize(self) -> int:
        return SAFETENSORS_DTYPES[self.stored][1]

    @property
    def is_floating_point(self) -> bool:
        return self.stored.startswith(("F", "BF"))

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype_name)

    @property
    def ir_dtype(self) -> ir.DataType:
        import onnx_ir as ir

        return ir.DataType[SAFETENSORS_DTYPES[self.stored][2]]

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype of the stored bytes (bfloat16 through ml_dtypes)."""
        return self.ir_dtype.numpy()


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Parse and check a safetensors header without reading tensor data."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise WeightsError(
                f"{path.name} is truncated (only {size} bytes); re-download or re-save it"
            )
        (header_len,) = struct.unpack("<Q", head)
        if header_len > min(MAX_HEADER_BYTES, size - 8):
            raise WeightsError(
                f"{path.name} has a corrupt header (claims {header_len} bytes); re-download or re-save it"
            )
        try:
            header = json.loads(f.read(header_len))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise WeightsError(
                f"{path.name} has a corrupt header (not JSON); re-download or re-save it"
            ) from None
    if not isinstance(header, dict):
        raise WeightsError(
            f"{path.name} has a corrupt header (not a JSON object); re-download or re-save it"
        )
    metadata = header.get("__metadata__")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise WeightsError(
            f"{path.name} has a corrupt header (__metadata__ must map names to strings); "
            "re-download or re-save it"
        )
    data_size = size - 8 - header_len
    entries: dict[str, TensorEntry] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        name = info.get("dtype") if isinstance(info, dict) else None
        if isinstance(name, str) and name not in SAFETENSORS_DTYPES:
            raise WeightsError(
                f"{path.name}: tensor '{key}' has dtype {name}, which mobius cannot read "
                f"(supported: {', '.join(SAFETENSORS_DTYPES)}); re-save the checkpoint in one of them"
            )
        try:
            stored, itemsize = info["dtype"], SAFETENSORS_DTYPES[info["dtype"]][1]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise WeightsError(
                f"{path.name} has a corrupt header: tensor '{key}' has a malformed entry; "
                "re-download or re-save it"
            ) from None
        if end > data_size:
            raise WeightsError(
                f"{path.name} is truncated: tensor '{key}' needs {end} data bytes but the file holds {data_size}; "
                "re-download or re-save it"
            )
        expected = math.prod(shape) * itemsize
        if min(shape, default=0) < 0 or begin < 0 or end - begin != expected:
            raise WeightsError(
                f"{path.name} has a corrupt header: tensor '{key}' has {end - begin} bytes for "
                f"shape {list(shape)} {info['dtype']}; re-download or re-save it"
            )
        entries[key] = TensorEntry(key, path, stored, shape, 8 + header_len + begin)
    return entries


# ".layers.3." (most), ".h.3." (gpt2, bloom, falcon), ".blocks.3." (rwkv): one stack's layer index
LAYER_INDEX = re.compile(r"\.(?:layers|layer|h|blocks|block)\.(\d+)\.")


def check_layer_count(arch: Any, keys: Iterable[str]) -> None:
    """Refuse, before tracing, a checkpoint with weights for fewer layers than config.json has.

    Its weights would be refused after the trace anyway, and tracing the thousands of layers that
    a wrong config can claim takes many minutes. Checkpoints whose keys name no layer index, or
    with more layers than the config (DeepSeek's MTP layers), are left to the per-tensor checks.
    The smallest positive layer count the config declares counts, whatever its field: BART's
    ``num_hidden_layers`` is its encoder's and its causal LM holds only the decoder's; HRM's counts
    recurrent steps over stacks of ``num_layers_per_stack``.
    """
    text = arch.hf_config.get_text_config() if arch.hf_config is not None else None
    fields = [
        v
        for k, v in getattr(text, "__dict__", {}).items()
        if "layers" in k or k.startswith("n_layer")
    ]
    declared = [
        n
        for n in (arch.num_layers, *fields)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0
    ]
    if not declared:
        return
    num_layers = min(declared)
    indices = [int(m.group(1)) for key in keys if (m := LAYER_INDEX.search(f".{key}"))]
    if indices and max(indices) + 1 < num_layers:
        raise WeightsError(
            f"config.json has {arch.num_layers} layers (at least {num_layers} with weights) but "
            f"the checkpoint holds weights for {max(indices) + 1}; the weights and the config do "
            "not belong together"
        )
