"""Match the constants a forward() builds in the meta trace to their values from a CPU trace.

torch.export names lifted constants by creation order (``lifted_tensor_0``, ``_1``, ...). A CPU
trace of the same model can create one more (or one fewer) than the meta trace (a tensor that
is a constant on one device and derived from an input on the other), which shifts every name
after it: matching by name would give a constant another's value. Both traces run the same code,
so their constants come in the same order; each is matched by its place in that order, its
shape and its dtype (``difflib`` aligns the two sequences), never by name. (Not by the ops that
read it: on meta a literal is read by ``detach_``, on CPU by ``lift_fresh_copy``.)
"""

from __future__ import annotations

import difflib

import torch


def _signatures(program: torch.export.ExportedProgram) -> list[tuple[str, tuple]]:
    """(constant name, (shape, dtype)) in graph order."""
    lifted = program.graph_signature.inputs_to_lifted_tensor_constants
    found = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in lifted:
            continue
        name = lifted[node.name]
        value = program.constants.get(name)
        if isinstance(value, torch.Tensor):
            found.append((name, (tuple(value.shape), value.dtype)))
    return found


def match_constants(
    meta: torch.export.ExportedProgram, cpu: torch.export.ExportedProgram
) -> dict[str, torch.Tensor]:
    """The CPU values of ``meta``'s constants that have none (on meta), by the meta names."""
    ours, theirs = _signatures(meta), _signatures(cpu)
    matcher = difflib.SequenceMatcher(
        None, [s for _, s in ours], [s for _, s in theirs], autojunk=False
    )
    values: dict[str, torch.Tensor] = {}
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            name = ours[block.a + offset][0]
            value = cpu.constants[theirs[block.b + offset][0]]
            if meta.constants[name].device.type == "meta" and value.device.type == "cpu":
                values[name] = value
    return values
