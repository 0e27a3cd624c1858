"""The components patterns/moe.py emits, against transformers' own eager experts and blocks:
``SelectedExperts`` (the compact decomposition) and ``FusedMoE`` (onnxruntime's com.microsoft MoE)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GptOssConfig, MixtralConfig
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts, GptOssMLP
from transformers.models.mixtral.modeling_mixtral import MixtralExperts, MixtralSparseMoeBlock

from mobius.components.moe import FusedMoE, SelectedExperts
from patterns.moe import _interleaved

H, INTER, E, K, TOKENS = 16, 8, 4, 2, 7


def _random(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return module.eval()


def _mixtral_config(act: str = "silu") -> MixtralConfig:
    config = MixtralConfig(
        hidden_size=H, intermediate_size=INTER, num_local_experts=E, num_experts_per_tok=K,
        num_attention_heads=2, hidden_act=act,
    )  # fmt: skip
    config._experts_implementation = "eager"  # transformers' reference loop over experts
    return config


def _gpt_oss_config() -> GptOssConfig:
    config = GptOssConfig(
        hidden_size=H, intermediate_size=INTER, num_local_experts=E, num_experts_per_tok=K,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8,
    )  # fmt: skip
    config._experts_implementation = "eager"
    return config


def _routing(rng) -> tuple[np.ndarray, np.ndarray]:
    index = np.stack([rng.choice(E, K, replace=False) for _ in range(TOKENS)]).astype(np.int64)
    return index, rng.random((TOKENS, K)).astype(np.float32)


@pytest.mark.parametrize("family", ["mixtral_silu", "mixtral_gelu", "gpt_oss"])
def test_selected_experts_match_transformers_experts(harness, rng, family):
    if family == "gpt_oss":
        ref = _random(GptOssExperts(_gpt_oss_config()))
        activation, transposed, alpha, beta, limit = "swiglu", True, ref.alpha, 1.0, ref.limit
    else:
        ref = _random(MixtralExperts(_mixtral_config(family.split("_")[1])))
        activation, transposed, alpha, beta, limit = family.split("_")[1], False, 1.0, 0.0, None
    state = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    x = rng.standard_normal((TOKENS, H)).astype(np.float32) * 2
    index, weights = _routing(rng)
    component = SelectedExperts(
        activation, transposed, alpha, beta, limit,
        gate_up_proj=harness.weight("gate_up_proj", state["gate_up_proj"]),
        down_proj=harness.weight("down_proj", state["down_proj"]),
        gate_up_bias=harness.weight("b1", state["gate_up_proj_bias"]) if transposed else None,
        down_bias=harness.weight("b2", state["down_proj_bias"]) if transposed else None,
    )  # fmt: skip
    op = harness.op
    (got,) = harness.run(
        component(op, harness.input("x", x), harness.input("i", index), harness.input("w", weights))
    )
    with torch.no_grad():
        expected = ref(*(torch.from_numpy(a) for a in (x, index, weights))).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def test_fused_moe_matches_mixtral_block(harness, rng):
    ref = _random(MixtralSparseMoeBlock(_mixtral_config()))
    state = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    x = rng.standard_normal((1, TOKENS, H)).astype(np.float32)
    flat = harness.input("x", x.reshape(TOKENS, H))
    logits = harness.op.MatMul(flat, harness.weight("gate_t", state["gate.weight"].T.copy()))
    fused = FusedMoE(
        K, True,
        fc1=harness.weight("fc1", _interleaved(state["experts.gate_up_proj"].copy())),
        fc2=harness.weight("fc2", state["experts.down_proj"]),
    )  # fmt: skip
    harness.graph.opset_imports["com.microsoft"] = 1
    (got,) = harness.run(fused(harness.op, flat, logits))
    with torch.no_grad():
        expected = ref(torch.from_numpy(x)).numpy().reshape(TOKENS, H)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def test_fused_moe_matches_gpt_oss_block(harness, rng):
    ref = _random(GptOssMLP(_gpt_oss_config()))
    state = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    x = rng.standard_normal((1, TOKENS, H)).astype(np.float32) * 3  # past the swiglu limit
    flat = harness.input("x", x.reshape(TOKENS, H))
    logits = harness.op.Add(
        harness.op.MatMul(flat, harness.weight("router_t", state["router.weight"].T.copy())),
        harness.weight("router_b", state["router.bias"]),
    )
    experts = ref.experts
    fused = FusedMoE(
        K, True, experts.alpha, 1.0, experts.limit,
        fc1=harness.weight("fc1", state["experts.gate_up_proj"].transpose(0, 2, 1).copy()),
        fc2=harness.weight("fc2", state["experts.down_proj"].transpose(0, 2, 1).copy()),
        fc1_bias=harness.weight("b1", state["experts.gate_up_proj_bias"]),
        fc2_bias=harness.weight("b2", state["experts.down_proj_bias"]),
    )  # fmt: skip
    harness.graph.opset_imports["com.microsoft"] = 1
    (got,) = harness.run(fused(harness.op, flat, logits))
    with torch.no_grad():
        expected = ref(torch.from_numpy(x))[0].numpy().reshape(TOKENS, H)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
