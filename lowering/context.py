"""What a lowering function gets: the op builder, the values lowered so far, and the type
queries lowerings share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
import torch.fx

from lowering.dtypes import onnx_dtype

INT64 = ir.DataType.INT64


def _meta_dummy(arg: Any) -> Any:
    """Something torch.result_type ranks the way it ranks ``arg``."""
    if isinstance(arg, torch.fx.Node):
        val = arg.meta.get("val")
        if isinstance(val, torch.Tensor):
            return torch.empty([1] * val.dim(), dtype=val.dtype, device="meta")
        if isinstance(val, (torch.SymFloat, float)):
            return 1.0
        if isinstance(val, (torch.SymBool, bool)):
            return True
        return 1
    return arg


class LoweringContext:
    """Passed to every lowering; ``op`` builds ONNX nodes (``ctx.op.Add(a, b)``)."""

    def __init__(self, op: Any) -> None:
        self.op = op
        self.env: dict[torch.fx.Node, Any] = {}
        self.state: dict[str, Any] = {}  # graph-wide facts that patterns share (masks, cache I/O)

    # -- reading FX arguments -------------------------------------------------------------------
    def val(self, arg: Any) -> Any:
        """The traced (fake) value of an FX argument, or the Python constant itself."""
        return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg

    def torch_dtype(self, arg: Any) -> torch.dtype:
        val = self.val(arg)
        if isinstance(val, torch.Tensor):
            return val.dtype
        if isinstance(val, (bool, torch.SymBool)):
            return torch.bool
        if isinstance(val, (int, torch.SymInt)):
            return torch.int64
        if isinstance(val, torch.SymFloat):  # the symbolic lowerings compute floats in double
            return torch.float64
        return torch.float32

    def rank(self, arg: Any) -> int:
        val = self.val(arg)
        return val.dim() if isinstance(val, torch.Tensor) else 0

    def promoted(self, *args: Any) -> torch.dtype:
        """torch's type promotion over tensors and scalars (what an elementwise op computes in)."""
        dummies = [_meta_dummy(a) for a in args if a is not None]
        tensors = [d for d in dummies if isinstance(d, torch.Tensor)]
        if not tensors:  # Python scalars: a float is a double (as torch_dtype says a SymFloat is)
            kinds = [type(d) for d in dummies]
            return (
                torch.float64
                if float in kinds
                else torch.bool
                if all(k is bool for k in kinds)
                else torch.int64
            )
        result = tensors[0]
        dtype = result.dtype
        for d in dummies:
            if d is result:
                continue
            dtype = torch.result_type(
                torch.empty([1] * result.dim(), dtype=dtype, device="meta"), d
            )
        return dtype

    # -- producing ONNX values -----------------------------------------------------------------
    def value(self, arg: Any, dtype: torch.dtype | None = None) -> ir.Value:
        """An ONNX value for an FX argument, cast to ``dtype`` when given."""
        if isinstance(arg, torch.fx.Node):
            value = self.env[arg]
            if dtype is not None and self.torch_dtype(arg) != dtype:
                value = self.op.Cast(value, to=onnx_dtype(dtype))
            return value
        if isinstance(arg, ir.Value):
            return arg
        return self.constant(arg, dtype)

    def constant(self, value: Any, dtype: torch.dtype | None = None) -> ir.Value:
        """A Constant node holding a Python scalar or list, in ``dtype``."""
        sample = value[0] if isinstance(value, (list, tuple)) and value else value
        if isinstance(sample, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise NotImplementedError(f"symbolic value {sample} has no node in the graph")
        if dtype is None:
            dtype = (
                torch.bool
                if isinstance(sample, bool)
                else torch.int64
                if isinstance(sample, int)
                else torch.float32
            )
        array = np.asarray(value).astype(onnx_dtype(dtype).numpy())
        return self.op.Constant(value=ir.tensor(array))

    def cast(self, value: ir.Value, dtype: torch.dtype) -> ir.Value:
        return self.op.Cast(value, to=onnx_dtype(dtype))

    def ints(self, items: Sequence[Any] | Any) -> ir.Value:
        """A 1-D int64 tensor from a list of ints and SymInt nodes (a shape, starts, axes...)."""
        if isinstance(items, torch.fx.Node):  # already a tensor of ints
            return self.value(items, torch.int64)
        items = list(items)
        if all(isinstance(i, int) for i in items):
            return self.op.Constant(value=ir.tensor(items, dtype=INT64))
        parts: list[ir.Value] = []
        run: list[int] = []
        for item in items:
            if isinstance(item, int):
                run.append(item)
                continue
            if run:
                parts.append(self.op.Constant(value=ir.tensor(run, dtype=INT64)))
                run = []
            scalar = self.value(item, torch.int64)
            parts.append(
                self.op.Reshape(scalar, self.op.Constant(value=ir.tensor([1], dtype=INT64)))
            )
        if run:
            parts.append(self.op.Constant(value=ir.tensor(run, dtype=INT64)))
        return parts[0] if len(parts) == 1 else self.op.Concat(*parts, axis=0)

    def scalar_int(self, item: Any) -> ir.Value:
        """A 0-d int64 tensor from an int or a SymInt node."""
        if isinstance(item, int):
            return self.op.Constant(value=ir.tensor(item, dtype=INT64))
        return self.value(item, torch.int64)

    def out_dtype(self, node: torch.fx.Node) -> torch.dtype:
        return self.torch_dtype(node)
