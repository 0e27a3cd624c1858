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
from typing import Any

import torch

from mobius.errors import WeightsError

SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives in a safetensors file, read from the header alone."""

    key: str
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int = -1  # of the first data byte in the file; -1: unknown


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
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
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
        expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if min(shape, default=0) < 0 or begin < 0 or end - begin != expected:
            raise WeightsError(
                f"{path.name} has a corrupt header: tensor '{key}' has {end - begin} bytes for "
                f"shape {list(shape)} {info['dtype']}; re-download or re-save it"
            )
        entries[key] = TensorEntry(key, path, dtype, shape, 8 + header_len + begin)
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
