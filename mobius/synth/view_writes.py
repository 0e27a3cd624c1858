"""Writes into slices of a tensor the graph made (``state[:, 0].copy_(new)``), rewritten as the
scatters functionalisation would give, without its re-trace of the whole program.

A ``copy_`` into a chain of ``slice``/``select`` views (and casts that hand back their input) of
a tensor computed in the graph becomes ``copy`` (the source broadcast and cast to the view) and
one ``slice_scatter``/``select_scatter`` per view up to that tensor; readers after the write, of
the tensor and of the views, read the scattered values. A write stays for functionalisation
(``decompose.decompose_unlowered``) when its tensor is a graph input, when a view in the chain
is of another kind, or when another view of the tensor, made before the write, is read after it.
"""

from __future__ import annotations

import torch
import torch.fx

from mobius.synth.views import MAYBE_SELF_OPS, is_view, nodes_before, stale_view

aten = torch.ops.aten

# a view op -> the scatter that writes through it
SCATTERS = {
    aten.slice.Tensor: aten.slice_scatter.default,
    aten.select.int: aten.select_scatter.default,
}


def rewrite_view_writes(gm: torch.fx.GraphModule) -> int:
    """Rewrite every write of ``gm`` that this module handles (in place); how many were."""
    done = sum(
        _rewrite(gm.graph, node)
        for node in list(gm.graph.nodes)
        if node.op == "call_function" and node.target is aten.copy_.default
    )
    if done:
        gm.graph.lint()
        gm.recompile()
    return done


def _chain(target: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The tensor ``target`` views, then each view down to ``target``; None: not such a chain."""
    views = []
    node = target
    while isinstance(node, torch.fx.Node) and is_view(node):
        packet = getattr(node.target, "overloadpacket", None)
        if node.target not in SCATTERS and packet not in MAYBE_SELF_OPS:
            return None
        views.append(node)
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or not views:
        return None
    return [node, *reversed(views)]


def _rewrite(graph: torch.fx.Graph, write: torch.fx.Node) -> bool:
    target, source = write.args[0], write.args[1]
    chain = _chain(target)
    if chain is None:
        return False
    before = nodes_before(write)
    if stale_view(chain[0], write, before, kept=chain):
        return False  # a view made before the write, read after it, would keep the old values
    written: dict[torch.fx.Node, torch.fx.Node] = {}
    with graph.inserting_before(write.next):
        value = graph.call_function(aten.copy.default, (target, source))
        value.meta["val"] = target.meta.get("val")
        written[target] = value
        for view in reversed(chain[1:]):  # from the innermost view up to the tensor
            parent = view.args[0]
            if view.target in SCATTERS:  # a cast that hands back its input passes the values on
                value = graph.call_function(SCATTERS[view.target], (parent, value, *view.args[1:]))
                value.meta["val"] = parent.meta.get("val")
            written[parent] = value
    new = set(written.values())
    for old, replacement in written.items():
        for user in list(old.users):
            if user is not write and user not in before and user not in new:
                user.replace_input_with(old, replacement)
    write.replace_all_uses_with(written[target])
    graph.erase_node(write)
    return True
