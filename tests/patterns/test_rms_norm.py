"""RMSNorm written with ``x.square()`` (kept by torch.export, lowered without a re-trace) fuses
as ``x.pow(2)`` does (``test_patterns.py``: Llama), and matches PyTorch."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import torch

import mobius


class SquareRMSNorm(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.square().mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + 1e-6) * self.weight


def test_rms_norm_over_a_square_fuses(tmp_path):
    norm = SquareRMSNorm(16).eval()
    x = torch.randn(2, 5, 16)
    out = mobius.build_module(norm, (x,)).save(tmp_path / "onnx")
    graph = ort.InferenceSession(str(out / "model.onnx"))
    ops = {n.op_type for n in onnx.load(out / "model.onnx").graph.node}
    assert "RMSNormalization" in ops and not ops & {"Pow", "ReduceMean", "Sqrt", "Reciprocal"}
    name = graph.get_inputs()[0].name
    got = graph.run(None, {name: x.numpy()})[0]
    np.testing.assert_allclose(got, norm(x).detach().numpy(), atol=1e-5)
