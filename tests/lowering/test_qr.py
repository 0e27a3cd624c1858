"""lowering.qr: QR of a tensor computed from weights alone, stored as Q and R initializers computed
when written; numpy's QR gives torch's signs."""

from __future__ import annotations

import io

import numpy as np
import onnx_ir as ir
import pytest
import torch

from lowering.qr_tensor import QRTensor, replay
from mobius.errors import UnsupportedError
from mobius.testing.lowering import check_lowering, lower_module

F32 = np.dtype(np.float32)


class Orthogonalised(torch.nn.Module):
    """Wan Animate's motion synthesis: x times Q^T of ``W + 1e-8`` (and R, to read both)."""

    def __init__(self, rows: int, cols: int, mode: str = "reduced") -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(rows, cols))
        self.mode = mode

    def forward(self, x):
        q, r = torch.linalg.qr((self.weight * 0.5 + 1e-8).to(torch.float32), mode=self.mode)
        return x @ q.T, r.sum(0)


@pytest.mark.parametrize(("rows", "cols", "mode"), [(16, 4, "reduced"), (6, 9, "reduced"),
                                                    (7, 3, "complete")])  # fmt: skip
def test_q_and_r_match_torch(rows, cols, mode):
    torch.manual_seed(rows)
    module = Orthogonalised(rows, cols, mode)
    inner = rows if mode == "complete" else min(rows, cols)  # Q's columns
    x, x2 = torch.randn(2, inner), torch.randn(5, inner)
    check_lowering(module, [x], [{0: "batch"}], [x2], atol=1e-5)


def test_q_and_r_are_initializers_named_after_the_weight():
    model = lower_module(Orthogonalised(16, 4), [torch.randn(2, 4)], [{0: "batch"}])
    derived = {
        name: dict(value.const_value.metadata_props)
        for name, value in model.graph.initializers.items()
        if isinstance(value.const_value, QRTensor)
    }
    assert derived == {
        f"weight.{part}": {
            "mobius.source_key": "weight",
            "mobius.transform": f"mul 0.5, add 1e-08, linalg_qr reduced {part}",
        }
        for part in "QR"
    }
    assert "weight" not in model.graph.initializers  # the steps to Q run when written, not per call
    assert {node.op_type for node in model.graph} <= {"MatMul", "Transpose", "ReduceSum"}


@pytest.mark.parametrize("shape", [(512, 20), (20, 20), (20, 512), (64, 8)])
def test_numpy_qr_has_torchs_signs(shape):
    # LAPACK's Householder QR in both (numpy in float64): Q's columns and R's rows keep one sign
    weight = torch.randn(shape, generator=torch.Generator().manual_seed(shape[0]))
    q, r = torch.linalg.qr(weight + 1e-8)
    steps = (("add", 1e-8, F32),)
    for part, expected in enumerate((q, r)):
        tensor = QRTensor(ir.tensor(weight.numpy()), steps, "reduced", part, name="w.Q")
        got = tensor.numpy()
        assert got.dtype == np.float32 and got.shape == tuple(expected.shape)
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)


def test_replay_computes_each_step_in_its_dtype():
    source = np.array([[1.0, 2.0]], dtype=np.float16)
    steps = (("cast", 0.0, F32), ("add", 1e-8, F32), ("mul", 3.0, F32))
    got = replay(source, steps)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, (source.astype(np.float32) + np.float32(1e-8)) * 3)


def test_qr_of_a_graph_input_is_declined():
    with pytest.raises(UnsupportedError, match="graph input"):
        lower_module(lambda x: torch.linalg.qr(x + 1.0)[0], [torch.randn(5, 3)])


def test_a_graph_cache_recipe_keeps_the_source():
    from mobius.graph_cache import recipe

    source = np.random.default_rng(2).standard_normal((12, 5)).astype(np.float32)
    tensor = QRTensor(ir.tensor(source), (("add", 1e-8, F32),), "reduced", 0, name="w.Q")
    tensor.numpy()  # materialised once: the recipe keeps how to make it, not the value
    again = recipe.loads(recipe.dumps(tensor, roots=()), checkpoint=None)
    assert again._tensor is None
    buffer = io.BytesIO()
    again.tofile(buffer)
    assert buffer.getvalue() == tensor.tobytes()
