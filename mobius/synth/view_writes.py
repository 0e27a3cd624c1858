"""Writes into views of a tensor the graph made (``state[:, 0].copy_(new)``,
``rows[1:] += first``), rewritten as the scatters functionalisation would give, without its
re-trace of the whole program.

An in-place op whose out-of-place form has a lowering (``copy_``, ``add_``, ``masked_fill_``,
...), writing into a chain of ``slice``/``select`` views (and casts that hand back their input)
of a tensor computed in the graph, becomes that out-of-place op on the view (``copy``: the source
broadcast and cast to the view) and one ``slice_scatter``/``select_scatter`` per view up to the
tensor; a ``transpose`` or ``permute`` in the chain covers its whole tensor and is undone.
Readers after the write, of the tensor and of the views, read the new values. Where nothing but
the chain reads the tensor and its views, views of any kind are fine (Gemma 3n's
``predictions.permute(...).view(...) += inputs``): the write only rebinds the view it writes. A
write into a whole graph input, parameter or buffer (Phi-3's LongRoPE ``inv_freq.copy_(...)``)
rebinds it too: the readers after the write read the new value in the graph itself, so a pattern
never takes the old one for a constant.

A write stays for functionalisation (``decompose.decompose_unlowered``) when it goes through a
view of a graph input, when another view kind meets other readers, or when another view of the
tensor, made before the write, is read after it.
"""

from __future__ import annotations

import torch
import torch.fx

from lowering import find_lowering
from mobius.synth.views import MAYBE_SELF_OPS, is_view, mutates, nodes_before, stale_view

aten = torch.ops.aten

# a view op -> the scatter that writes through it
SCATTERS = {
    aten.slice.Tensor: aten.slice_scatter.default,
    aten.select.int: aten.select_scatter.default,
}


def _transposed_back(graph: torch.fx.Graph, view: torch.fx.Node, value: torch.fx.Node):
    _, first, second = view.args
    return graph.call_function(aten.transpose.int, (value, first, second))


def _permuted_back(graph: torch.fx.Graph, view: torch.fx.Node, value: torch.fx.Node):
    dims = [d % len(view.args[1]) for d in view.args[1]]
    return graph.call_function(
        aten.permute.default, (value, sorted(range(len(dims)), key=dims.__getitem__))
    )


# a view op that covers its whole tensor -> the tensor's new value from the view's
REORDERS = {aten.transpose.int: _transposed_back, aten.permute.default: _permuted_back}


def functional_overload(node: torch.fx.Node) -> torch._ops.OpOverload | None:
    """The out-of-place overload of in-place ``node`` (``add_.Tensor`` -> ``add.Tensor``), when
    it has a lowering; None for other nodes."""
    if not mutates(node) or not isinstance(node.args[0], torch.fx.Node):
        return None
    name = node.target._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(aten, name[:-1], None)
    overload = getattr(packet, node.target._overloadname, None) if packet is not None else None
    return overload if overload is not None and find_lowering(overload) is not None else None


def rewrite_view_writes(gm: torch.fx.GraphModule) -> int:
    """Rewrite every write of ``gm`` that this module handles (in place); how many were."""
    done = sum(
        _rewrite(gm.graph, node, functional)
        for node in list(gm.graph.nodes)
        if (functional := functional_overload(node)) is not None
    )
    if done:
        gm.graph.lint()
        gm.recompile()
    return done


def _chain(target: torch.fx.Node) -> tuple[list[torch.fx.Node], bool] | None:
    """(the tensor ``target`` views, then each view down to ``target``; whether writes reach the
    tensor by scatters); None: not a chain of views of a tensor the graph made, or one with a view
    that has no scatter while something besides the chain reads the tensor or a view. A graph
    input written whole is a chain of itself."""
    if target.op == "placeholder":  # a graph input, parameter or buffer written whole
        return [target], False
    views = []
    node = target
    while isinstance(node, torch.fx.Node) and is_view(node):
        views.append(node)
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or not views:
        return None
    chain = [node, *reversed(views)]
    if all(_writes_through(v) for v in views):
        return chain, True
    if all(len(n.users) == 1 for n in chain[:-1]):  # only the chain reads them: rebind the view
        return chain, False
    return None


def _writes_through(view: torch.fx.Node) -> bool:
    """A write into ``view`` reaches its tensor by a scatter or a reordering, or unchanged."""
    return (
        view.target in SCATTERS
        or view.target in REORDERS
        or view.target.overloadpacket in MAYBE_SELF_OPS
    )


def _rewrite(
    graph: torch.fx.Graph, write: torch.fx.Node, functional: torch._ops.OpOverload
) -> bool:
    target = write.args[0]
    found = _chain(target)
    if found is None:
        return False
    chain, scatters = found
    before = nodes_before(write)
    if stale_view(chain[0], write, before, kept=chain):
        return False  # a view made before the write, read after it, would keep the old values
    written: dict[torch.fx.Node, torch.fx.Node] = {}
    with graph.inserting_before(write.next):
        value = graph.call_function(functional, (target, *write.args[1:]), dict(write.kwargs))
        value.meta["val"] = target.meta.get("val")  # the in-place result: the view's shape, dtype
        written[target] = value
        for view in reversed(chain[1:]) if scatters else ():  # innermost view up to the tensor
            parent = view.args[0]
            if view.target in SCATTERS:
                value = graph.call_function(SCATTERS[view.target], (parent, value, *view.args[1:]))
            elif view.target in REORDERS:
                value = REORDERS[view.target](graph, view, value)
            # else a cast that hands back its input: it passes the values on
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
