"""2-D pooling over windows: MaxPool, AveragePool, and adaptive average pooling to one cell."""

from __future__ import annotations

import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.linalg import _pairs
from lowering.registry import lowers

aten = torch.ops.aten


def _window(ctx: LoweringContext, node: torch.fx.Node) -> dict[str, list[int]]:
    """kernel_shape, strides (default: the kernel) and symmetric pads of a pooling call."""
    args = list(node.args)
    spatial = ctx.rank(args[0]) - 2
    kernel = _pairs(args[1], spatial)
    stride = _pairs(args[2], spatial) if len(args) > 2 and args[2] else kernel
    pads = _pairs(args[3] if len(args) > 3 else 0, spatial)
    return {"kernel_shape": kernel, "strides": stride, "pads": pads + pads}


@lowers(aten.max_pool2d, aten.max_pool2d_with_indices)
def max_pool(ctx: LoweringContext, node: torch.fx.Node):
    args = list(node.args) + [None] * 6
    spatial = ctx.rank(args[0]) - 2
    if args[5]:
        raise NotImplementedError("max pooling with ceil_mode")
    dilations = _pairs(args[4] if args[4] is not None else 1, spatial)
    out = ctx.op.MaxPool(ctx.value(args[0]), dilations=dilations, **_window(ctx, node))
    if node.target.overloadpacket is not aten.max_pool2d_with_indices:
        return out
    if any(user.args[1] == 1 and user.users for user in node.users):
        raise NotImplementedError("max pooling's indices")
    return out, out  # the indices are never read


@lowers(aten.avg_pool2d)
def avg_pool(ctx: LoweringContext, node: torch.fx.Node):
    args = list(node.args) + [None] * 7
    ceil_mode, count_include_pad, divisor = args[4], args[5], args[6]
    if ceil_mode or divisor is not None:
        raise NotImplementedError("average pooling with ceil_mode or divisor_override")
    include = True if count_include_pad is None else bool(count_include_pad)
    return ctx.op.AveragePool(
        ctx.value(args[0]), count_include_pad=int(include), **_window(ctx, node)
    )


@lowers(aten.adaptive_avg_pool2d, aten._adaptive_avg_pool2d)
def adaptive_avg_pool(ctx: LoweringContext, node: torch.fx.Node):
    """Only to one cell per channel (``AdaptiveAvgPool2d(1)``, the usual classifier pooling)."""
    size = node.args[1]
    if any(s != 1 for s in (size if isinstance(size, (list, tuple)) else [size])):
        raise NotImplementedError(f"adaptive average pooling to {size}")
    return ctx.op.GlobalAveragePool(ctx.value(node.args[0]))
