import numpy as np
import pytest
import torch
from transformers import LlamaConfig, PhiConfig
from transformers.models.llama.modeling_llama import LlamaMLP
from transformers.models.phi.modeling_phi import PhiMLP

from mobius.components import MLP, GatedMLP, Linear

H, INTER = 8, 12


def _random(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return module.eval()


def _state(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_pytorch_tanh", "relu"])
def test_gated_mlp_existing_values(harness, rng, act):
    ref = _random(
        LlamaMLP(
            LlamaConfig(
                hidden_size=H, num_attention_heads=2, intermediate_size=INTER, hidden_act=act
            )
        )
    )
    state = _state(ref)
    x = rng.standard_normal((2, 3, H)).astype(np.float32)
    mlp = GatedMLP(
        activation=act,
        gate_proj=harness.weight("g", state["gate_proj.weight"]),
        up_proj=harness.weight("u", state["up_proj.weight"]),
        down_proj=harness.weight("d", state["down_proj.weight"]),
    )
    (got,) = harness.run(mlp(harness.op, harness.input("x", x)))
    np.testing.assert_allclose(got, ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_gated_mlp_parameters_named_like_hf(harness, load, rng):
    ref = _random(
        LlamaMLP(
            LlamaConfig(
                hidden_size=H, num_attention_heads=2, intermediate_size=INTER, mlp_bias=True
            )
        )
    )
    x = rng.standard_normal((5, H)).astype(np.float32)
    mlp = GatedMLP(H, INTER, bias=True, name="mlp")
    load(mlp, _state(ref))
    (got,) = harness.run(mlp(harness.op, harness.input("x", x)))
    assert set(harness.graph.initializers) >= {f"mlp.{k}" for k in ref.state_dict()}
    np.testing.assert_allclose(got, ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_mlp_phi(harness, load, rng):
    ref = _random(
        PhiMLP(
            PhiConfig(
                hidden_size=H, num_attention_heads=2, intermediate_size=INTER, hidden_act="gelu_new"
            )
        )
    )
    x = rng.standard_normal((2, 4, H)).astype(np.float32)
    mlp = MLP(H, INTER, activation="gelu_new", name="mlp")
    load(mlp, _state(ref))
    (got,) = harness.run(mlp(harness.op, harness.input("x", x)))
    assert {"mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"} <= set(
        harness.graph.initializers
    )
    np.testing.assert_allclose(got, ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_mlp_existing_values_and_names(harness, rng):
    ref = _random(
        PhiMLP(
            PhiConfig(
                hidden_size=H, num_attention_heads=2, intermediate_size=INTER, hidden_act="relu"
            )
        )
    )
    s = _state(ref)
    x = rng.standard_normal((3, H)).astype(np.float32)
    w = {k: harness.weight(k, v) for k, v in s.items()}
    mlp = MLP(
        activation="relu",
        fc1=Linear(weight=w["fc1.weight"], bias=w["fc1.bias"]),
        fc2=Linear(weight=w["fc2.weight"], bias=w["fc2.bias"]),
        names=("dense_h_to_4h", "dense_4h_to_h"),
    )
    (got,) = harness.run(mlp(harness.op, harness.input("x", x)))
    np.testing.assert_allclose(got, ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_unknown_activation():
    with pytest.raises(ValueError, match="supported"):
        GatedMLP(H, INTER, activation="mish")
