import numpy as np
import pytest
import torch
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from mobius.components import LayerNorm, RMSNorm

H = 16


def _randomise(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
    return module.eval()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rmsnorm_llama(harness, dtype):
    ref = _randomise(LlamaRMSNorm(H, eps=1e-5)).to(
        torch.float16 if dtype == np.float16 else torch.float32
    )
    x = np.random.default_rng(1).standard_normal((2, 3, H)).astype(dtype)
    w = ref.weight.detach().numpy()
    y = RMSNorm(eps=1e-5, weight=harness.weight("norm.weight", w))(
        harness.op, harness.input("x", x)
    )
    (got,) = harness.run(y)
    expected = ref(torch.from_numpy(x)).detach().numpy()
    assert got.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(
        got.astype(np.float32), expected.astype(np.float32), atol=tol, rtol=tol
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rmsnorm_gemma_offset(harness, load, dtype):
    ref = _randomise(GemmaRMSNorm(H, eps=1e-6)).to(
        torch.float16 if dtype == np.float16 else torch.float32
    )
    x = np.random.default_rng(2).standard_normal((2, 3, H)).astype(dtype)
    norm = RMSNorm(
        H, eps=1e-6, offset=1.0, dtype=harness.input("x", x).dtype, name="input_layernorm"
    )
    load(norm, {"weight": ref.weight.detach().numpy()})
    y = norm(harness.op, harness.graph.inputs[0])
    (got,) = harness.run(y)
    assert "input_layernorm.weight" in harness.graph.initializers
    expected = ref(torch.from_numpy(x)).detach().numpy()
    tol = 1e-5 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(
        got.astype(np.float32), expected.astype(np.float32), atol=tol, rtol=tol
    )


def test_rmsnorm_per_head(harness):
    """qwen3-style q/k norm: normalise [batch, seq, heads, head_dim] with a [head_dim] weight."""
    ref = _randomise(LlamaRMSNorm(8, eps=1e-6))
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 8)).astype(np.float32)
    y = RMSNorm(eps=1e-6, weight=harness.weight("w", ref.weight.detach().numpy()))(
        harness.op, harness.input("x", x)
    )
    (got,) = harness.run(y)
    np.testing.assert_allclose(got, ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm(harness, load, bias):
    ref = _randomise(torch.nn.LayerNorm(H, eps=1e-5, bias=bias))
    x = np.random.default_rng(4).standard_normal((2, 5, H)).astype(np.float32)
    state = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    if bias:  # the existing-value path
        norm = LayerNorm(
            eps=1e-5,
            weight=harness.weight("ln.weight", state["weight"]),
            bias=harness.weight("ln.bias", state["bias"]),
        )
    else:  # the Parameter path, named like HF
        norm = LayerNorm(H, eps=1e-5, bias=False, name="ln_f")
        load(norm, state)
    (got,) = harness.run(norm(harness.op, harness.input("x", x)))
    if not bias:
        assert set(harness.graph.initializers) == {"ln_f.weight"}
    np.testing.assert_allclose(got, ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5, rtol=1e-5)
