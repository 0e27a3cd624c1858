"""aten -> ONNX lowering: one small function per op family, registered in a table.

Importing this package fills the table (``LOWERINGS``). Lowering imports torch, onnxscript and
onnx_ir only: nothing of mobius.
"""

from lowering import (  # noqa: F401  (imported for their registrations)
    complex_ops,
    creation,
    elementwise,
    fft,
    indexing,
    linalg,
    nn,
    pooling,
    reduction,
    resize,
    selection,
    shape,
    special,
    symbolic,
    triangular,
    windows,
)
from lowering.complex_ops import find_complex_lowering, involves_complex
from lowering.context import LoweringContext
from lowering.dtypes import onnx_dtype
from lowering.registry import LOWERINGS, find_lowering, lowers, op_name

__all__ = [
    "LOWERINGS",
    "LoweringContext",
    "find_complex_lowering",
    "find_lowering",
    "involves_complex",
    "lowers",
    "onnx_dtype",
    "op_name",
]
