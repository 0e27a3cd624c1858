"""aten -> ONNX lowering: one small function per op family, registered in a table.

The table (``LOWERINGS``) is filled on first use of this package's names (``find_lowering``,
``LoweringContext``, ...), which imports every op module. Importing one submodule alone, such as
``lowering.transposed`` (a lazily transposed initializer, which a warm build's weight recipes
name), fills nothing and does not import torch. Lowering imports torch, onnxscript and onnx_ir
only: nothing of mobius.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lowering.complex_ops import find_complex_lowering, involves_complex
    from lowering.context import LoweringContext
    from lowering.dtypes import onnx_dtype
    from lowering.registry import LOWERINGS, find_lowering, lowers, node_lowering, op_name

__all__ = [
    "LOWERINGS",
    "LoweringContext",
    "find_complex_lowering",
    "find_lowering",
    "involves_complex",
    "lowers",
    "node_lowering",
    "onnx_dtype",
    "op_name",
]

# the modules whose import registers their lowerings
OP_MODULES = (
    "complex_ops", "creation", "elementwise", "fft", "grids", "indexing", "linalg", "nn", "pooling",
    "qr", "reduction", "resize", "selection", "shape", "special", "symbolic", "triangular",
    "windows",
)  # fmt: skip
_HOMES = {
    "find_complex_lowering": "complex_ops",
    "involves_complex": "complex_ops",
    "LoweringContext": "context",
    "onnx_dtype": "dtypes",
    "LOWERINGS": "registry",
    "find_lowering": "registry",
    "lowers": "registry",
    "node_lowering": "registry",
    "op_name": "registry",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'lowering' has no attribute {name!r}")
    for module in OP_MODULES:
        importlib.import_module(f"lowering.{module}")
    value = getattr(importlib.import_module(f"lowering.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
