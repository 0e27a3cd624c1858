"""Which traced nodes are views of a tensor, and which views are read after a write into it:
what decides whether an in-place write can be rewritten without functionalising the program."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator

import torch
import torch.fx

aten = torch.ops.aten

VIEW_OPS = {
    aten.view, aten.reshape, aten._unsafe_view, aten.slice, aten.select, aten.transpose, aten.permute,
    aten.t, aten.expand, aten.unsqueeze, aten.squeeze, aten.alias, aten.as_strided, aten.diagonal,
    aten.narrow, aten.split, aten.chunk, aten.unbind, aten.unflatten, aten.flatten, aten.view_as,
    aten.detach, aten.expand_as, aten.split_with_sizes, aten.movedim,
}  # fmt: skip

# ops that return their input itself when there is nothing to do (same dtype and device, already
# contiguous): ``state.to(state.dtype).copy_(new)`` then writes into ``state``
MAYBE_SELF_OPS = {aten.to, aten.contiguous, aten.type_as}


def mutates(node: torch.fx.Node) -> bool:
    """Whether ``node`` calls an op that writes into an argument (``copy_``, ``add_``, ...)."""
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and schema.is_mutable


def is_view(node: torch.fx.Node) -> bool:
    """Whether ``node`` is a view of its first argument (or may hand that argument back)."""
    packet = getattr(node.target, "overloadpacket", None)
    return packet in VIEW_OPS or (packet in MAYBE_SELF_OPS and _returns_self(node))


def _returns_self(node: torch.fx.Node) -> bool:
    """Whether a ``MAYBE_SELF_OPS`` node hands back its input unchanged (as traced)."""
    source = node.args[0] if node.args else None
    before = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    after = node.meta.get("val")
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return True  # unknown: assume it aliases
    return (
        before.dtype == after.dtype
        and before.device == after.device
        and before.is_contiguous() == after.is_contiguous()
    )


def views_of(node: torch.fx.Node) -> Iterator[torch.fx.Node]:
    """Every view of ``node``, views of views and the parts of a split included."""
    for user in node.users:
        if is_view(user) or (user.target is operator.getitem and is_view(node)):
            yield user
            yield from views_of(user)


def nodes_before(write: torch.fx.Node) -> set[torch.fx.Node]:
    """The nodes of ``write``'s graph that come before it."""
    before: set[torch.fx.Node] = set()
    for node in write.graph.nodes:
        if node is write:
            break
        before.add(node)
    return before


def stale_view(
    tensor: torch.fx.Node,
    write: torch.fx.Node,
    before: set[torch.fx.Node] | None = None,
    kept: Iterable = (),
) -> bool:
    """Whether a view of ``tensor`` (other than ``kept``) made before ``write`` is read after it:
    that view should see the written values, which a rewrite of ``tensor`` does not give it
    (views made after the write read the rewritten value, as they should). ``before``
    (``nodes_before(write)``) is walked for only when ``tensor`` has a view to check."""
    kept = set(kept)
    views = [v for v in views_of(tensor) if v not in kept]
    if not views:
        return False
    before = nodes_before(write) if before is None else before
    return any(
        view in before and any(u is not write and u not in before for u in view.users)
        for view in views
    )
