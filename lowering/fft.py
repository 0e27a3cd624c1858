"""Discrete Fourier transforms (``torch.fft``: FNet's token mixing) as ONNX ``DFT``.

Complex values are real tensors with a trailing axis of 2 (``complex_ops``), which is also the
layout ``DFT`` reads and writes; a real input gets a trailing axis of 1. ``DFT`` transforms one
axis per node, so a transform over several dims is a chain. Scaling: ONNX's inverse divides by
``n``, torch's ``_fft_*`` ops take the scaling as an argument (0 none, 1 by ``sqrt(n)``, 2 by
``n``, ``n`` the product of the transformed sizes), so the inverse's ``1/n`` is undone first.
"""

from __future__ import annotations

import onnx_ir as ir
import torch
import torch.fx

from lowering.complex_ops import complex_lowers
from lowering.context import INT64, LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten


def _dims(ctx: LoweringContext, node: torch.fx.Node) -> list[int]:
    """The transformed dims, non-negative against the traced (complex or real) rank."""
    rank = ctx.rank(node.args[0])
    return [d % rank for d in node.args[1]]


def _length(ctx: LoweringContext, signal: ir.Value, axis: int, real: torch.dtype) -> ir.Value:
    """The size of ``axis`` of ``signal`` as a 0-d float."""
    size = ctx.op.Gather(ctx.op.Shape(signal), ctx.op.Constant(value=ir.tensor(axis, dtype=INT64)))
    return ctx.cast(size, real)


def _transform(
    ctx: LoweringContext, signal: ir.Value, axis: int, *, inverse: bool, onesided: bool = False
) -> ir.Value:
    """One unscaled DFT of ``signal`` (trailing axis 1 or 2) along ``axis``."""
    return ctx.op.DFT(
        signal,
        None,
        ctx.op.Constant(value=ir.tensor(axis, dtype=INT64)),
        inverse=int(inverse),
        onesided=int(onesided),
    )


def _scale(
    ctx: LoweringContext,
    result: ir.Value,
    sizes: list[ir.Value],
    normalization: int,
    inverse: bool,
    real: torch.dtype,
) -> ir.Value:
    """torch's scaling of an unnormalised transform, ONNX's inverse ``1/n`` undone."""
    if not sizes:
        return result
    total = sizes[0]
    for size in sizes[1:]:
        total = ctx.op.Mul(total, size)
    if inverse:  # every inverse DFT node divided by its own length
        result = ctx.op.Mul(result, total)
    if normalization == 1:
        return ctx.op.Div(result, ctx.op.Sqrt(total))
    if normalization == 2:
        return ctx.op.Div(result, total)
    return result


@complex_lowers(aten._fft_c2c)
def fft_c2c(ctx: LoweringContext, node: torch.fx.Node):
    """``_fft_c2c(x, dim, normalization, forward)`` on a represented complex ``x``."""
    real = ctx.out_dtype(node).to_real()
    normalization, forward = node.args[2], node.args[3]
    signal = ctx.value(node.args[0])
    sizes = []
    for axis in _dims(ctx, node):
        sizes.append(_length(ctx, signal, axis, real))
        signal = _transform(ctx, signal, axis, inverse=not forward)
    return _scale(ctx, signal, sizes, normalization, not forward, real)


@lowers(aten._fft_r2c)
@complex_lowers(aten._fft_r2c)
def fft_r2c(ctx: LoweringContext, node: torch.fx.Node):
    """``_fft_r2c(x, dim, normalization, onesided)``: real in, complex out; with ``onesided`` the
    last transformed dim keeps ``n // 2 + 1`` frequencies (transformed first, as the half
    spectrum of a real signal)."""
    real = ctx.out_dtype(node).to_real()
    normalization, onesided = node.args[2], node.args[3]
    x = ctx.value(node.args[0], real)
    signal = ctx.op.Unsqueeze(x, ctx.op.Constant(value=ir.tensor([-1], dtype=INT64)))
    dims = _dims(ctx, node)
    sizes = [_length(ctx, x, axis, real) for axis in dims]
    signal = _transform(ctx, signal, dims[-1], inverse=False, onesided=bool(onesided))
    for axis in dims[:-1]:
        signal = _transform(ctx, signal, axis, inverse=False)
    return _scale(ctx, signal, sizes, normalization, False, real)


def _normalization(norm: str | None, inverse: bool) -> int:
    """torch's ``norm`` string as the ``_fft_*`` ops' scaling code (0 none, 1 sqrt(n), 2 n):
    ``backward`` (the default) scales the inverse, ``forward`` the forward transform."""
    if norm == "ortho":
        return 1
    scaled = inverse if norm in (None, "backward") else not inverse
    return 2 if scaled else 0


def _signal(ctx: LoweringContext, arg: torch.fx.Node, real: torch.dtype) -> ir.Value:
    """``arg`` as a DFT signal: a complex value as it is, a real one with a trailing axis of 1."""
    if ctx.torch_dtype(arg).is_complex:
        return ctx.value(arg)
    x = ctx.value(arg, real)
    return ctx.op.Unsqueeze(x, ctx.op.Constant(value=ir.tensor([-1], dtype=INT64)))


def _full_length(node: torch.fx.Node, size_arg: int) -> None:
    if (
        node.args[size_arg]
        if len(node.args) > size_arg
        else node.kwargs.get("s" if size_arg else "n")
    ):
        raise NotImplementedError("an FFT length other than the input's (padding or cropping)")


@lowers(aten.fft_fft, aten.fft_ifft, aten.fft_fftn, aten.fft_ifftn, aten.fft_rfft)
@complex_lowers(aten.fft_fft, aten.fft_ifft, aten.fft_fftn, aten.fft_ifftn, aten.fft_rfft)
def fft(ctx: LoweringContext, node: torch.fx.Node):
    """``torch.fft.fft/ifft/fftn/ifftn/rfft`` at the input's own lengths (``n``/``s`` unset)."""
    packet = node.target.overloadpacket
    inverse = packet in (aten.fft_ifft, aten.fft_ifftn)
    several = packet in (aten.fft_fftn, aten.fft_ifftn)
    _full_length(node, 1)
    rank = ctx.rank(node.args[0])
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", None if several else -1)
    dims = list(range(rank)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [d % rank for d in dims]
    norm = node.args[3] if len(node.args) > 3 else node.kwargs.get("norm")
    real = ctx.out_dtype(node).to_real()
    signal = _signal(ctx, node.args[0], real)
    sizes = [_length(ctx, signal, axis, real) for axis in dims]
    onesided = packet is aten.fft_rfft
    for i, axis in enumerate(reversed(dims)):
        signal = _transform(ctx, signal, axis, inverse=inverse, onesided=onesided and i == 0)
    return _scale(ctx, signal, sizes, _normalization(norm, inverse), inverse, real)
