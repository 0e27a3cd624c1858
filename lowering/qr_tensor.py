"""Q or R of a weight's QR factorisation, computed only when written (``lowering/qr.py`` makes
them); like ``lowering.transposed``, importing it alone imports no torch, so a warm build's
weight recipes can name it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from lowering.transposed import DerivedTensor

# elementwise steps with a Python scalar that the derived tensor replays, by aten op name
SCALAR_STEPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
}

# one step from the weight to the QR's input: (kind, scalar, the numpy dtype of its result);
# kind "cast" only changes the dtype
Step = tuple[str, float, np.dtype]


def replay(source: np.ndarray, steps: tuple[Step, ...]) -> np.ndarray:
    """``source`` through ``steps``, each computed in its result's dtype (as torch computes it)."""
    value = source
    for kind, scalar, dtype in steps:
        value = value.astype(dtype, copy=False)
        if kind != "cast":
            value = SCALAR_STEPS[kind](value, np.asarray(scalar, dtype=dtype)).astype(dtype)
    return value


class QRTensor(DerivedTensor):
    """Q (``part`` 0) or R (1) of ``numpy.linalg.qr`` in ``mode`` of an initializer passed
    through ``steps``, computed when written."""

    def __init__(
        self, source: ir.TensorProtocol, steps: tuple[Step, ...], mode: str, part: int, name: str
    ) -> None:
        rows, cols = (int(d) for d in source.shape)
        inner = min(rows, cols) if mode == "reduced" else rows
        shape = [rows, inner] if part == 0 else [inner, cols]
        dtype = ir.DataType.from_numpy(steps[-1][2]) if steps else source.dtype
        super().__init__(source, dtype, shape, name)
        self.steps, self.mode, self.part = steps, mode, part

    def _materialize(self) -> ir.TensorProtocol:
        matrix = replay(self.source_tensor.numpy(), self.steps)
        wide = matrix if matrix.dtype in (np.float32, np.float64) else matrix.astype(np.float64)
        factor = np.linalg.qr(wide, mode=self.mode)[self.part]  # 16-bit floats: in float64
        return ir.tensor(np.ascontiguousarray(factor.astype(matrix.dtype, copy=False)))
