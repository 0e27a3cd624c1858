"""Whether the PyTorch model and the converted package fit in memory together, estimated before
anything is loaded: from the checkpoint's tensor shapes and the package's file sizes."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import torch

from mobius.errors import MobiusError

GIB = 1 << 30
# PyTorch holds its parameters plus activations and the allocator's slack; onnxruntime its
# initializers plus per-session copies of pre-packed weights; both need room to run
TORCH_OVERHEAD = 1.2
ONNX_OVERHEAD = 1.5
RESERVE = GIB // 2


class NotEnoughMemory(MobiusError):
    """The PyTorch model and the package would not fit in the memory available (exit 2)."""


def tensor_bytes(shapes: Iterable[tuple[int, ...]], dtype: torch.dtype) -> int:
    """Bytes of tensors of these shapes held in ``dtype``."""
    size = torch.empty((), dtype=dtype).element_size()
    return sum(math.prod(shape) * size for shape in shapes)


def package_bytes(directory: Path) -> int:
    """Bytes of the package's graphs and external data (every ``*.onnx*`` file below it)."""
    return sum(p.stat().st_size for p in Path(directory).rglob("*.onnx*") if p.is_file())


def available_bytes() -> int | None:
    """Memory the system can give this process now (None where it cannot be read)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as lines:
            for line in lines:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(reference: int, package: int, available: int | None = None) -> None:
    """Refuse (one line) when ``reference`` bytes of PyTorch weights and ``package`` bytes of
    ONNX files will not fit in the available memory."""
    available = available_bytes() if available is None else available
    if available is None:
        return
    need = int(reference * TORCH_OVERHEAD + package * ONNX_OVERHEAD + RESERVE)
    if need > available:
        raise NotEnoughMemory(
            f"verify needs about {need / GIB:.1f} GiB (the PyTorch model {reference / GIB:.1f} "
            f"GiB, the package {package / GIB:.1f} GiB) and {available / GIB:.1f} GiB is "
            "available; run it on a machine with more memory, or on a smaller checkpoint of the "
            "same architecture"
        )
