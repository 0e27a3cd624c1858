"""Inline the subgraphs of grad-mode regions (``with torch.no_grad():`` inside forward) and of
autocast regions that cast nothing.

Non-strict export wraps a region run under a different grad mode in the higher-order op
``wrap_with_set_grad_enabled(enabled, submodule, *operands)``. Grad mode changes nothing in an
inference graph, so the region's nodes are copied into the parent graph in its place. An
autocast region (``wrap_with_autocast(device, dtype, enabled, cache, submodule, *operands)``)
that is disabled, or autocasts another device than the CPU the graph is traced for (Z-Image's
``autocast("cuda", enabled=False)``), changes nothing either; one that casts is left to
``decompose.decompose_unlowered``, whose re-trace applies it.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

try:
    from torch._higher_order_ops.wrap import wrap_with_set_grad_enabled as GRAD_REGION
except ImportError:  # an older torch has no such op, so nothing to inline
    GRAD_REGION = None
AUTOCAST_REGION = getattr(torch.ops.higher_order, "wrap_with_autocast", None)


def _body_argument(node: torch.fx.Node) -> int | None:
    """Where a region node that changes nothing holds its submodule; None: not such a node."""
    if node.op != "call_function":
        return None
    if GRAD_REGION is not None and node.target is GRAD_REGION:
        return 1
    if AUTOCAST_REGION is not None and node.target is AUTOCAST_REGION:
        device, _, enabled = node.args[:3]
        return 4 if not enabled or device != "cpu" else None
    return None


def inline_grad_regions(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Replace every grad-mode region of ``program``, and every autocast region that casts
    nothing, by its nodes (in place; returns ``program``)."""
    gm = program.graph_module
    changed = False
    while True:  # a region may hold another: repeat until none is left
        regions = [(n, i) for n in gm.graph.nodes if (i := _body_argument(n)) is not None]
        if not regions:
            break
        for node, body in regions:
            _inline(gm, node, body)
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return program


def _inline(gm: torch.fx.GraphModule, node: torch.fx.Node, body_argument: int) -> None:
    sub_attr, operands = node.args[body_argument], node.args[body_argument + 1 :]
    body: torch.fx.GraphModule = getattr(gm, sub_attr.target)
    graph = gm.graph
    env: dict[torch.fx.Node, object] = {}
    outputs: tuple = ()
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    env.update(zip(placeholders, operands, strict=True))
    with graph.inserting_before(node):
        for inner in body.graph.nodes:
            if inner.op == "placeholder":
                continue
            if inner.op == "output":
                outputs = inner.args[0]
                break
            copied = graph.node_copy(inner, lambda a: env[a])
            if inner.op == "get_attr":  # a nested region's submodule moves up with it
                name = _free_name(gm, str(inner.target))
                setattr(gm, name, getattr(body, inner.target))
                copied.target = name
            env[inner] = copied
    outputs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
    results = [env.get(o, o) if isinstance(o, torch.fx.Node) else o for o in outputs]
    for user in list(node.users):
        if user.op != "call_function" or user.target is not operator.getitem:
            raise NotImplementedError(f"region output used by {user.format_node()}")
        user.replace_all_uses_with(results[user.args[1]])
        graph.erase_node(user)
    graph.erase_node(node)
    if not sub_attr.users:
        graph.erase_node(sub_attr)
        delattr(gm, sub_attr.target)


def _free_name(gm: torch.fx.GraphModule, base: str) -> str:
    name, i = base, 0
    while hasattr(gm, name):
        i += 1
        name = f"{base}_{i}"
    return name
