"""Ops without a lowering are decomposed with torch's own decomposition table, when it has one.

``run_decompositions`` re-traces the whole program, which costs tens of seconds on a large model,
so it runs only when needed: for ops with neither a lowering nor a safe in-place form, to
functionalise in-place writes through views that ``view_writes`` cannot rewrite, and for what
torch.export leaves un-lowered until a re-trace (autocast regions that cast, vmap's levels).
What nothing reads and changes no value is dropped first, as the re-trace would drop it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from lowering import node_lowering
from mobius.synth.inline import AUTOCAST_REGION
from mobius.synth.view_writes import functional_overload, rewrite_view_writes
from mobius.synth.views import is_view, mutates, stale_view

aten = torch.ops.aten
# the module of ``torch.vmap``'s levels as torch.export keeps them (``_add_batch_dim``, ...): only
# the program's re-trace turns them into batched aten ops
FUNCTORCH_PREDISPATCH = "torch._functorch.predispatch"


def decompose_unlowered(
    program: torch.export.ExportedProgram, rounds: int = 3
) -> torch.export.ExportedProgram:
    """Run torch's decompositions only for the ops the lowering table lacks (a few rounds deep)."""
    rewrite_view_writes(program.graph_module)  # writes into views: scatters or rebindings
    drop_unread(program.graph_module)
    if any(_needs_re_trace(n) for n in program.graph.nodes):
        with _no_stack_traces():
            program = program.run_decompositions({})
    # torch's table costs ~0.15 CPU s to build: only when an op may be in it. Its entries are aten
    # ops and CompositeImplicitAutograd ops of other namespaces, so an unlowered op of another
    # namespace that is not composite (``mobius::attention``, claimed by a pattern) never needs it
    table: dict | None = None
    for _ in range(rounds):
        candidates = {
            n.target
            for n in program.graph.nodes
            if n.op == "call_function"
            and node_lowering(n) is None
            and functional_form(n) is None
            and (_aten(n.target) or _composite(n.target))
        }
        if not candidates:
            break
        if table is None:
            table = dict(torch.export.default_decompositions())
        todo = {op for op in candidates if op in table or _composite(op)}
        if not todo:
            break
        with _no_stack_traces():
            program = program.run_decompositions(
                {op: table.get(op, getattr(op, "decompose", None)) for op in todo}
            )
    return program


def drop_unread(gm: torch.fx.GraphModule) -> bool:
    """Remove the op calls nothing reads that change no value (pure ops and value-keeping writes
    such as ``detach_``), and what only they read; whether any were.

    A constant forward() makes and drops is read on meta by a ``detach_`` (on CPU by a
    ``lift_fresh_copy`` that torch.export drops): Reformer's empty bucket cache. Once that write is
    gone nothing reads the constant, so it needs no value (``emit`` skips it). Only op overloads
    go, whose schemas say what they write: a Python call such as vmap's level bookkeeping stays.
    """
    dropped = False
    for node in reversed(gm.graph.nodes):  # readers first: what only they read is then unread
        if (
            not node.users
            and node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and (not node.is_impure() or (mutates(node) and keeps_value(node)))
        ):
            gm.graph.erase_node(node)
            dropped = True
    if dropped:
        gm.recompile()
    return dropped


def _needs_re_trace(node: torch.fx.Node) -> bool:
    """What only a re-trace of the whole program turns into lowerable aten ops: an in-place write
    neither ``view_writes`` nor a rebinding handles (functionalised), an autocast region that
    casts (applied), and ``torch.vmap``'s batching levels (T5Gemma 2's encoder: batched)."""
    return (
        (mutates(node) and functional_form(node) is None)
        or node.target is AUTOCAST_REGION
        or getattr(node.target, "__module__", None) == FUNCTORCH_PREDISPATCH
    )


@contextlib.contextmanager
def _no_stack_traces() -> Iterator[None]:
    """No Python stack trace captured per re-traced node (mobius never reads them; capturing
    them was a sixth of DeepSeek-V3's re-trace)."""
    import torch.fx.config as fx_config

    before = fx_config.do_not_emit_stack_traces
    fx_config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        fx_config.do_not_emit_stack_traces = before


def _aten(op: object) -> bool:
    return isinstance(op, torch._ops.OpOverload) and op.namespace == "aten"


def _composite(op: object) -> bool:
    """An op torch defines in terms of other ops (CompositeImplicitAutograd): it decomposes itself."""
    name = getattr(op, "name", None)
    if not isinstance(op, torch._ops.OpOverload) or not callable(name):  # e.g. higher-order ops
        return False
    return torch._C._dispatch_has_kernel_for_dispatch_key(name(), "CompositeImplicitAutograd")


def functional_form(node: torch.fx.Node) -> torch._ops.OpOverload | None:
    """For ``x.op_(...)`` writing into a plain (non-view, unviewed) tensor: the overload of ``op``.

    Lowering that and rebinding ``x`` to the result is then exact: nothing else aliases ``x``.
    """
    functional = functional_overload(node)
    if functional is None:
        return None
    target = node.args[0]
    aliased = target.op != "call_function" or is_view(target)
    if not keeps_value(node) and (aliased or stale_view(target, node)):
        return None
    return functional


# in-place ops that change no value: autograd state only, or a dropout outside training
VALUE_KEEPING = {"detach_"}
DROPOUTS = {"dropout_", "feature_dropout_"}


def keeps_value(node: torch.fx.Node) -> bool:
    """Whether in-place ``node`` leaves its tensor's values as they were, so rebinding the tensor
    to its out-of-place result is exact even where views alias it (``nn.Dropout(inplace=True)``
    in eval mode writes into a transposed view in diffusers' UNet1D)."""
    name = node.target._schema.name.split("::")[-1]
    if name in VALUE_KEEPING:
        return True
    if name in DROPOUTS:
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train", True)
        return train is False
    return False
