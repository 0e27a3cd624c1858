import numpy as np
import pytest
import torch

from mobius.components import Linear


@pytest.mark.parametrize("bias", [True, False])
def test_linear_existing_values(harness, rng, bias):
    ref = torch.nn.Linear(6, 5, bias=bias).eval()
    x = rng.standard_normal((2, 3, 6)).astype(np.float32)
    w = harness.weight("proj.weight", ref.weight.detach().numpy())
    b = harness.weight("proj.bias", ref.bias.detach().numpy()) if bias else False
    (got,) = harness.run(Linear(weight=w, bias=b)(harness.op, harness.input("x", x)))
    np.testing.assert_allclose(got, ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_linear_parameters_named_like_hf(harness, load, rng):
    ref = torch.nn.Linear(6, 5).eval()
    x = rng.standard_normal((4, 6)).astype(np.float32)
    linear = Linear(6, 5, bias=True, name="q_proj")
    load(linear, {k: v.detach().numpy() for k, v in ref.state_dict().items()})
    (got,) = harness.run(linear(harness.op, harness.input("x", x)))
    assert set(harness.graph.initializers) == {"q_proj.weight", "q_proj.bias"}
    assert list(harness.graph.initializers["q_proj.weight"].shape) == [5, 6]  # HF layout [out, in]
    np.testing.assert_allclose(got, ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_linear_needs_sizes_or_weight():
    with pytest.raises(ValueError, match="existing ir.Value"):
        Linear()
