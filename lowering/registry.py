"""The table from aten op (or Python operator on SymInts) to the function that lowers it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LoweringFn = Callable[..., Any]

LOWERINGS: dict[Any, LoweringFn] = {}
# lowering -> why it leaves a node to torch's decomposition (None: it lowers that node)
DECLINES: dict[LoweringFn, Callable[[Any], str | None]] = {}


def lowers(
    *targets: Any, declines: Callable[[Any], str | None] | None = None
) -> Callable[[LoweringFn], LoweringFn]:
    """Register ``fn`` as the lowering of every target (an OpOverload, OpOverloadPacket or callable).

    Registering an OpOverloadPacket (``aten.add``) covers all its overloads. ``declines(node)``
    says why ``fn`` leaves a node of these targets to torch's decomposition table, or None.
    """

    def register(fn: LoweringFn) -> LoweringFn:
        for target in targets:
            LOWERINGS[target] = fn
        if declines is not None:
            DECLINES[fn] = declines
        return fn

    return register


def node_lowering(node: Any) -> LoweringFn | None:
    """The lowering of an FX node: its target's, unless that one declines this node."""
    fn = find_lowering(node.target)
    if fn is not None and fn in DECLINES and DECLINES[fn](node) is not None:
        return None
    return fn


def find_lowering(target: Any) -> LoweringFn | None:
    """The lowering for an FX node target: its exact overload first, then its overload packet."""
    fn = LOWERINGS.get(target)
    if fn is None:
        packet = getattr(target, "overloadpacket", None)
        if packet is not None:
            fn = LOWERINGS.get(packet)
    return fn


def op_name(target: Any) -> str:
    """A readable name for an FX node target, such as ``aten.add.Tensor``."""
    if hasattr(target, "_schema") or hasattr(target, "overloadpacket"):
        return str(target)
    module = getattr(target, "__module__", "") or ""
    return f"{module}.{getattr(target, '__name__', repr(target))}".lstrip(".")
