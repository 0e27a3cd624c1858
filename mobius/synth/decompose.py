"""Ops without a lowering are decomposed with torch's own decomposition table, when it has one."""

from __future__ import annotations

import torch

from lowering import find_lowering


def decompose_unlowered(
    program: torch.export.ExportedProgram, rounds: int = 3
) -> torch.export.ExportedProgram:
    """Run torch's decompositions only for the ops the lowering table lacks (a few rounds deep)."""
    if any(_mutates(n) for n in program.graph.nodes):
        program = program.run_decompositions({})  # functionalise in-place ops (add_, copy_, ...)
    table = torch.export.default_decompositions()
    for _ in range(rounds):
        todo = {
            n.target
            for n in program.graph.nodes
            if n.op == "call_function" and find_lowering(n.target) is None and n.target in table
        }
        if not todo:
            break
        program = program.run_decompositions({op: table[op] for op in todo})
    return program


def _mutates(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and schema.is_mutable
