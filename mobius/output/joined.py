"""An initializer joined from several others (packed q/k/v, packed MatMulNBits parts) when saved."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from mobius.output.direct_io import DirectTofile
from mobius.output.package import writes_alongside


class JoinedTensor(DirectTofile, ir.LazyTensor):
    """``parts`` concatenated along ``axis``, made only when the model is saved. Each part is read
    by this tensor alone, so writer threads may write it alongside others when every part may be
    written so."""

    def __init__(
        self,
        parts: Sequence[ir.TensorProtocol],
        axis: int,
        name: str,
        dtype: ir.DataType,
        shape: Sequence[int],
    ) -> None:
        self.parts, self.axis = list(parts), axis
        super().__init__(self._join, dtype=dtype, shape=ir.Shape(list(shape)), name=name)

    def _join(self) -> ir.TensorProtocol:
        return ir.tensor(
            np.concatenate([t.numpy() for t in self.parts], axis=self.axis), name=self.name
        )

    def tofile(self, file) -> None:
        """Joined along the first axis, the bytes are each part's in turn: every part writes
        itself (a checkpoint tensor streams chunk by chunk, cast on the way) and nothing is
        joined in memory. Along another axis, or in a type of less than a byte (two parts' halves
        could share one), the parts are joined first."""
        whole_bytes = self.dtype.bitwidth % 8 == 0
        if self.axis != 0 or not whole_bytes or any(p.dtype != self.dtype for p in self.parts):
            super().tofile(file)
            return
        for part in self.parts:
            part.tofile(file)

    @property
    def parallel_write_safe(self) -> bool:
        return all(writes_alongside(t) for t in self.parts)
