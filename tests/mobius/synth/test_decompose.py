"""In-place writes through an op that may hand back its input (``to``, ``contiguous``).

``x.to(x.dtype)`` is ``x`` itself, so ``state[:, 0].to(torch.float32).copy_(new)`` writes into
``state`` (zamba's per-head recurrent update). Such a write is not lowered as a plain rebinding;
the program is functionalised instead, and the written tensor carries the update.
"""

import pytest
import torch

from mobius.synth.decompose import decompose_unlowered, functional_form
from mobius.synth.emit import emit
from mobius.synth.trace import TracedModel
from mobius.tasks.base import TensorSpec
from mobius.testing.lowering import check_lowering, run_onnx


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


class Composites(torch.nn.Module):
    """Composite ops torch.export keeps, and writes that change no value into tensors views alias:
    an autograd-only one, and an in-place dropout outside training into a transposed view."""

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x.clone()
        view = x[:, 1:]  # aliases the tensor written below
        x.detach_()
        flipped = torch.nn.functional.dropout(x.t(), 0.5, training=False, inplace=True)
        grid = torch.meshgrid(torch.linspace(0, 1, 3), x[0], indexing="ij")[0]
        norm = torch.linalg.norm(torch.nan_to_num(x.square()), dim=-1)
        hot = torch.nn.functional.one_hot(labels, 4)
        return grid, norm, torch.isfinite(view), hot, flipped * 2


def test_lowered_composites_and_value_keeping_writes_need_no_second_trace():
    program = torch.export.export(
        Composites(), (torch.randn(2, 3), torch.tensor([1, 3])), strict=False
    )
    targets = {n.target for n in program.graph.nodes}
    aten = torch.ops.aten
    assert {aten.detach_.default, aten.dropout_.default, aten.linspace.default} <= targets
    assert decompose_unlowered(program) is program  # no run_decompositions
    check_lowering(Composites(), [torch.randn(2, 3), torch.tensor([1, 3])])


class WholeWrite(torch.nn.Module):
    """A write into a whole tensor, with views of it made before and after."""

    def __init__(self, read_old_view_after: bool) -> None:
        super().__init__()
        self.read_old_view_after = read_old_view_after

    def forward(self, state: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        state = state.clone()
        early = state[:, :1]  # a view made before the write
        first = early * 2  # read before it
        state.copy_(new)
        late = state[:, 1:]  # made after it: sees the new values
        out = first.sum() + late.sum(dim=1)
        return out + early.sum() if self.read_old_view_after else out


@pytest.mark.parametrize("read_old_view_after", [False, True])
def test_a_write_into_a_whole_tensor_is_a_rebinding_unless_an_older_view_reads_it(
    read_old_view_after,
):
    module, args = WholeWrite(read_old_view_after), (torch.randn(2, 3), torch.randn(2, 3))
    program = torch.export.export(module, args, strict=False)
    (copy,) = _copies(program)
    expected = None if read_old_view_after else torch.ops.aten.copy.default
    assert functional_form(copy) is expected
    check_lowering(module, list(args))  # either way the graph carries the write


class Batched(torch.nn.Module):
    """``torch.vmap`` (T5Gemma 2's encoder): torch.export keeps its batching levels as
    ``torch._functorch.predispatch`` calls, which only the re-trace turns into aten ops."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda row: row * 2 + row.sum())(x)


def test_vmap_levels_are_re_traced_into_aten_ops():
    check_lowering(Batched(), [torch.randn(3, 4)])


class DroppedConstant(torch.nn.Module):
    """A tensor made in forward and kept by nothing the graph returns (Reformer's empty bucket
    cache): traced on meta, torch.export lifts it as a constant with no value, read by ``detach_``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache = [torch.tensor([], device=x.device)]
        return x * 2


def test_a_constant_made_in_forward_and_dropped_needs_no_value():
    meta = (torch.zeros(2, 3, device="meta"),)
    program = torch.export.export(DroppedConstant(), meta, strict=False)
    (constant,) = program.constants.values()
    assert constant.device.type == "meta"
    assert decompose_unlowered(program) is program  # no re-trace: the unread detach_ is dropped
    (placeholder,) = (n for n in program.graph.nodes if n.op == "placeholder" and n.name != "x")
    assert not placeholder.users
    traced = TracedModel(
        program=program,
        inputs=[TensorSpec("input_0", torch.float32, (2, 3))],
        outputs=["output_0"],
        buffer_values={},
        tied_names={},
        constant_values={},
        key_to_param=None,
        dtype=torch.float32,
    )
    model = emit(traced, traced.binder(None))  # binding the constant would raise WeightsError
    x = torch.randn(2, 3)
    (got,) = run_onnx(model, [x])
    torch.testing.assert_close(torch.from_numpy(got), x * 2)
