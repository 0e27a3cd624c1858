"""The table from aten op (or Python operator on SymInts) to the function that lowers it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LoweringFn = Callable[..., Any]

LOWERINGS: dict[Any, LoweringFn] = {}


def lowers(*targets: Any) -> Callable[[LoweringFn], LoweringFn]:
    """Register ``fn`` as the lowering of every target (an OpOverload, OpOverloadPacket or callable).

    Registering an OpOverloadPacket (``aten.add``) covers all its overloads.
    """

    def register(fn: LoweringFn) -> LoweringFn:
        for target in targets:
            LOWERINGS[target] = fn
        return fn

    return register


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
