"""torch dtype <-> ONNX data type."""

from __future__ import annotations

import onnx_ir as ir
import torch

TORCH_TO_ONNX: dict[torch.dtype, ir.DataType] = {
    torch.float32: ir.DataType.FLOAT,
    torch.float16: ir.DataType.FLOAT16,
    torch.bfloat16: ir.DataType.BFLOAT16,
    torch.float64: ir.DataType.DOUBLE,
    torch.int64: ir.DataType.INT64,
    torch.int32: ir.DataType.INT32,
    torch.int16: ir.DataType.INT16,
    torch.int8: ir.DataType.INT8,
    torch.uint8: ir.DataType.UINT8,
    torch.bool: ir.DataType.BOOL,
    torch.complex64: ir.DataType.COMPLEX64,
}


def onnx_dtype(dtype: torch.dtype) -> ir.DataType:
    try:
        return TORCH_TO_ONNX[dtype]
    except KeyError:
        raise NotImplementedError(f"no ONNX type for torch dtype {dtype}") from None


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


ONNX_TO_TORCH: dict[ir.DataType, torch.dtype] = {v: k for k, v in TORCH_TO_ONNX.items()}


def torch_dtype(dtype: ir.DataType) -> torch.dtype:
    """The torch dtype of an ONNX data type (the inverse of ``onnx_dtype``)."""
    try:
        return ONNX_TO_TORCH[dtype]
    except KeyError:
        raise NotImplementedError(f"no torch dtype for ONNX type {dtype}") from None
