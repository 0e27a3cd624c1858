"""QR of a matrix computed from weights alone: Q and R are constants of the checkpoint, computed
when the weights are written (ONNX has no QR operator).

Wan Animate's motion encoder orthogonalises a parameter on every call
(``torch.linalg.qr(weight + 1e-8)[0]``). The traced graph runs on meta, without weight values,
so the lowering follows the QR's input back through elementwise steps with a Python scalar
(``add``, ``sub``, ``mul``, ``div``) and dtype casts to one initializer, and stores Q and R as
initializers derived from it (``<key>.Q``, ``<key>.R``, with ``mobius.source_key`` and
``mobius.transform``) that replay those steps and ``numpy.linalg.qr`` when written
(``qr_tensor.QRTensor``). numpy's QR is LAPACK's Householder QR, as torch's on CPU: the same
signs (``tests/lowering/test_qr.py``). A QR of anything a graph input reaches is declined.
"""

from __future__ import annotations

import onnx_ir as ir
import torch
import torch.fx

from lowering.context import LoweringContext
from lowering.dtypes import onnx_dtype
from lowering.qr_tensor import SCALAR_STEPS, QRTensor, Step
from lowering.registry import lowers

aten = torch.ops.aten

# ops whose values pass to the QR unchanged but for their dtype
_CASTS = ("to", "_to_copy", "type_as", "clone", "alias", "detach", "contiguous")


def _name(node: torch.fx.Node) -> str:
    packet = getattr(node.target, "overloadpacket", None)
    return getattr(packet, "__name__", "") if packet is not None else ""


def _step(node: torch.fx.Node) -> tuple[torch.fx.Node, Step]:
    """The input ``node`` reads and the step it applies; NotImplementedError for other ops."""
    name, args = _name(node), node.args
    dtype = onnx_dtype(node.meta["val"].dtype).numpy()
    scalar = len(args) == 2 and isinstance(args[1], (int, float)) and not isinstance(args[1], bool)
    if name in SCALAR_STEPS and scalar and node.kwargs.get("alpha", 1) == 1:
        return args[0], (name, float(args[1]), dtype)
    if name in _CASTS:
        return args[0], ("cast", 0.0, dtype)
    raise NotImplementedError(
        f"QR of a tensor computed by {node.target}, not from weights alone (no ONNX QR operator)"
    )


def weight_steps(ctx: LoweringContext, node: torch.fx.Node) -> tuple[ir.Value, tuple[Step, ...]]:
    """The initializer ``node`` is computed from and the steps from it, first step first."""
    steps: list[Step] = []
    while node.op == "call_function":
        node, step = _step(node)
        steps.append(step)
    value = ctx.value(node)
    if node.op != "placeholder" or not value.is_initializer() or value.const_value is None:
        raise NotImplementedError("QR of a graph input (no ONNX QR operator)")
    return value, tuple(reversed(steps))


def _initializer(
    ctx: LoweringContext, w: ir.Value, steps: tuple[Step, ...], mode: str, part: int
) -> ir.Value:
    source = w.const_value
    name = f"{w.name}.{'QR'[part]}"
    tensor = QRTensor(source, steps, mode, part, name=name)
    value = ir.Value(
        name=name, type=ir.TensorType(tensor.dtype), shape=tensor.shape, const_value=tensor
    )
    tensor.metadata_props["mobius.source_key"] = source.metadata_props.get(
        "mobius.source_key", w.name or ""
    )
    done = [f"{kind} {scalar:g}" for kind, scalar, _ in steps if kind != "cast"]
    tensor.metadata_props["mobius.transform"] = ", ".join([*done, f"linalg_qr {mode} {'QR'[part]}"])
    ctx.op.builder.graph.register_initializer(value)
    return value


@lowers(aten.linalg_qr)
def linalg_qr(ctx: LoweringContext, node: torch.fx.Node):
    """``linalg_qr(A, mode)`` of a 2-D A computed from one initializer: (Q, R) as initializers."""
    mode = node.args[1] if len(node.args) > 1 else node.kwargs.get("mode", "reduced")
    if mode not in ("reduced", "complete") or ctx.rank(node.args[0]) != 2:
        raise NotImplementedError(f"QR in mode {mode!r} or of a batch of matrices")
    w, steps = weight_steps(ctx, node.args[0])
    if len(w.const_value.shape) != 2:
        raise NotImplementedError("QR of a weight reshaped on the way")
    return tuple(_initializer(ctx, w, steps, mode, part) for part in (0, 1))
