"""Image resizing (``F.interpolate``): ONNX ``Resize``."""

from __future__ import annotations

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.registry import lowers

aten = torch.ops.aten

# torch's source coordinate without align_corners is (dst + 0.5) * in / out - 0.5, clamped at 0:
# ONNX's "pytorch_half_pixel" (which also maps a length-1 output to 0, as torch does)
_MODES = {
    aten.upsample_linear1d: ("linear", None),
    aten.upsample_bilinear2d: ("linear", None),
    aten.upsample_bicubic2d: ("cubic", -0.75),
    aten.upsample_nearest1d: ("nearest", None),
    aten.upsample_nearest2d: ("nearest", None),
    aten.upsample_nearest3d: ("nearest", None),
}


def _resize(ctx: LoweringContext, node: torch.fx.Node, sizes, scales, align_corners: bool):
    mode, cubic = _MODES[node.target.overloadpacket]
    x = ctx.value(node.args[0])
    attrs: dict = {"mode": mode}
    if mode == "nearest":  # torch's nearest: floor(dst * in / out), ONNX's "asymmetric" + floor
        attrs |= {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    else:
        transform = "align_corners" if align_corners else "pytorch_half_pixel"
        attrs["coordinate_transformation_mode"] = transform
    if cubic is not None:
        attrs["cubic_coeff_a"] = cubic
    if sizes is not None:
        head = ctx.op.Slice(ctx.op.Shape(x), ctx.ints([0]), ctx.ints([2]))
        full = ctx.op.Concat(head, ctx.ints(list(sizes)), axis=0)
        return ctx.op.Resize(x, None, None, full, **attrs)
    full = ctx.constant([1.0, 1.0, *[float(s) for s in scales]], torch.float32)
    return ctx.op.Resize(x, None, full, **attrs)


@lowers(aten.upsample_linear1d, aten.upsample_bilinear2d, aten.upsample_bicubic2d)
def upsample(ctx: LoweringContext, node: torch.fx.Node):
    """``.vec`` (input, output_size, align_corners, scale_factors) or the default overload
    (input, output_size, align_corners, one scale per spatial axis): torch uses the given scale
    factors for the coordinates when it has them, the size ratio otherwise; so does ``Resize``."""
    args = list(node.args) + [None] * 5
    x, size, align_corners = args[0], args[1], bool(args[2])
    spatial = ctx.rank(x) - 2
    scales = (
        args[3] if isinstance(args[3], (list, tuple)) or args[3] is None else args[3 : 3 + spatial]
    )
    if align_corners or not scales or any(s is None for s in scales):
        return _resize(ctx, node, size or _out_size(x, scales), None, align_corners)
    return _resize(ctx, node, None, scales, align_corners)


@lowers(aten.upsample_nearest1d, aten.upsample_nearest2d, aten.upsample_nearest3d)
def upsample_nearest(ctx: LoweringContext, node: torch.fx.Node):
    """``.vec`` (input, output_size, scale_factors) or the default overload (input,
    output_size, one scale per spatial axis)."""
    args = list(node.args) + [None] * 4
    x, size = args[0], args[1]
    spatial = ctx.rank(x) - 2
    scales = (
        args[2] if isinstance(args[2], (list, tuple)) or args[2] is None else args[2 : 2 + spatial]
    )
    if scales and all(s is not None for s in scales):
        return _resize(ctx, node, None, scales, False)
    return _resize(ctx, node, size or _out_size(x, scales), None, False)


def _out_size(x: torch.fx.Node, scales) -> list:
    shape = x.meta["val"].shape
    return [int(d * s) for d, s in zip(shape[2:], scales, strict=True)]


_GRID_MODES = {0: "linear", 1: "nearest", 2: "cubic"}  # torch's interpolation_mode numbers
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@lowers(aten.grid_sampler_2d, aten.grid_sampler)
def grid_sampler_2d(ctx: LoweringContext, node: torch.fx.Node):
    """``F.grid_sample`` on 4-D input: ONNX ``GridSample`` (opset 20 names its modes
    ``linear``/``cubic``)."""
    x, grid, mode, padding, align_corners = node.args[:5]
    if ctx.rank(x) != 4:
        raise NotImplementedError("grid_sample on other than 4-D input")
    return ctx.op.GridSample(
        ctx.value(x),
        ctx.value(grid),
        mode=_GRID_MODES[mode],
        padding_mode=_GRID_PADDING[padding],
        align_corners=int(align_corners),
    )
