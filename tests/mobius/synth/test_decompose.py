"""In-place writes through an op that may hand back its input (``to``, ``contiguous``).

``x.to(x.dtype)`` is ``x`` itself, so ``state[:, 0].to(torch.float32).copy_(new)`` writes into
``state`` (zamba's per-head recurrent update). Such a write is not lowered as a plain rebinding;
the program is functionalised instead, and the written tensor carries the update.
"""

import torch

from mobius.synth.decompose import decompose_unlowered, functional_form


class WriteThrough(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, state: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        state = state.clone()
        head = state[:, 0].to(self.dtype)
        head.copy_(new)
        return state


def _copies(program: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    return [n for n in program.graph.nodes if n.target is torch.ops.aten.copy_.default]


def _export(dtype: torch.dtype) -> torch.export.ExportedProgram:
    args = (torch.zeros(2, 3, 4), torch.randn(2, 4))
    return torch.export.export(WriteThrough(dtype), args, strict=False)


def test_a_write_through_a_no_op_cast_is_not_lowered_as_a_rebinding():
    program = _export(torch.float32)
    (copy,) = _copies(program)
    assert functional_form(copy) is None


def test_a_write_into_a_real_cast_stays_a_rebinding():
    program = _export(torch.float64)  # a new tensor: writing into it leaves ``state`` alone
    (copy,) = _copies(program)
    assert functional_form(copy) is torch.ops.aten.copy.default


def test_the_functionalised_program_carries_the_write():
    program = decompose_unlowered(_export(torch.float32))
    assert not _copies(program)
    state, new = torch.zeros(2, 3, 4), torch.randn(2, 4)
    out = program.module()(state, new)
    torch.testing.assert_close(out, WriteThrough(torch.float32)(state, new))
    assert out[:, 0].abs().sum() > 0
