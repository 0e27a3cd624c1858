"""Ops without a lowering are decomposed with torch's own decomposition table, when it has one."""

from __future__ import annotations

import torch

from lowering import find_lowering


def decompose_unlowered(program: torch.export.ExportedProgram, rounds: int = 3) -> torch.export.ExportedProgram:
    """Run torch's decompositions only for the ops the lowering table lacks (a few rounds deep)."""
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
