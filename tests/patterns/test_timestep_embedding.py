"""The sinusoidal timestep embedding -> one component (patterns/timestep_embedding.py): its values
against PyTorch's, and what it declines."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mobius.testing.lowering import exported_node, lower_module, run_onnx
from patterns import timestep_embedding
from patterns.base import Claim, aten, is_op


class _Timesteps(torch.nn.Module):
    def __init__(self, dim: int, flip: bool, shift: float, scale: float = 1.0) -> None:
        super().__init__()
        self.dim, self.flip, self.shift, self.scale = dim, flip, shift, scale

    def forward(self, t):
        from diffusers.models.embeddings import get_timestep_embedding

        return get_timestep_embedding(t, self.dim, self.flip, self.shift, self.scale) * 2


@pytest.mark.parametrize(("dim", "flip", "shift", "scale"), [(8, True, 0, 1), (7, False, 1, 1000)])
def test_timestep_embedding_is_one_component_with_pytorchs_values(dim, flip, shift, scale):
    module = _Timesteps(dim, flip, shift, scale)
    model = lower_module(module, (torch.rand(3) * 1000,), [{0: "batch"}])
    ops = [n.op_type for n in model.graph]
    assert "Range" not in ops and "Exp" not in ops  # the frequencies are one constant
    assert ops.count("Sin") == ops.count("Cos") == 1
    t = torch.rand(5) * 900
    np.testing.assert_allclose(run_onnx(model, (t,))[0], module(t).numpy(), atol=1e-4, rtol=0)
    cat = next(n for n in torch.export.export(module, (t,)).graph.nodes if is_op(n, aten.cat))
    claim = timestep_embedding.match(cat)
    assert isinstance(claim, Claim) and claim.component == "TimestepEmbedding"
    assert claim.attributes["frequencies"] == dim // 2
    assert claim.attributes["flip_sin_to_cos"] is flip and claim.attributes["scale"] == scale


class _InputFrequencies(torch.nn.Module):
    def forward(self, t, freqs):
        x = t[:, None] * freqs[None, :]
        return torch.cat([torch.sin(x), torch.cos(x)], dim=-1)


def test_timestep_embedding_declines_frequencies_from_an_input():
    node = exported_node(_InputFrequencies(), (torch.rand(3), torch.rand(4)), aten.cat)
    assert "constant frequencies" in timestep_embedding.match(node).reason
