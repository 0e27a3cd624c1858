import numpy as np
import pytest
import torch
from transformers import DeepseekV3Config, MixtralConfig, Qwen2MoeConfig
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

from mobius.components import Experts, GatedMLP, MoE, SigmoidGroupRouter, SoftmaxTopKRouter

H, INTER, E = 16, 12, 8


def _random(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            t.copy_(torch.randn_like(t) * 0.5)
    return module.eval()


def _state(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def _reference(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def test_mixtral_existing_values(harness, rng):
    config = MixtralConfig(
        hidden_size=H,
        intermediate_size=INTER,
        num_local_experts=E,
        num_experts_per_tok=2,
        num_attention_heads=2,
    )
    ref = _random(MixtralSparseMoeBlock(config))
    s = _state(ref)
    assert s["experts.gate_up_proj"].shape == (E, 2 * INTER, H) and s[
        "experts.down_proj"
    ].shape == (
        E,
        H,
        INTER,
    )
    x = rng.standard_normal((2, 5, H)).astype(np.float32)
    moe = MoE(
        SoftmaxTopKRouter(
            top_k=2, normalize=True, weight=harness.weight("gate.weight", s["gate.weight"])
        ),
        Experts(
            activation="silu",
            gate_up_proj=harness.weight("experts.gate_up_proj", s["experts.gate_up_proj"]),
            down_proj=harness.weight("experts.down_proj", s["experts.down_proj"]),
        ),
    )
    (got,) = harness.run(moe(harness.op, harness.input("x", x)))
    np.testing.assert_allclose(got, _reference(ref, x), atol=1e-5, rtol=1e-5)


def test_qwen2_moe_shared_expert_gate_parameter_path(harness, load, rng):
    config = Qwen2MoeConfig(
        hidden_size=H,
        moe_intermediate_size=INTER,
        shared_expert_intermediate_size=20,
        num_experts=E,
        num_experts_per_tok=3,
        norm_topk_prob=False,
        num_attention_heads=2,
    )
    ref = _random(Qwen2MoeSparseMoeBlock(config))
    x = rng.standard_normal((3, 4, H)).astype(np.float32)
    moe = MoE(
        SoftmaxTopKRouter(H, E, top_k=3, normalize=False),
        Experts(E, H, INTER, activation="silu"),
        shared_expert=GatedMLP(H, 20),
        shared_expert_gate=True,
        hidden_size=H,
        name="mlp",
    )
    load(moe, _state(ref))  # strict: every HF key is consumed and every parameter filled
    (got,) = harness.run(moe(harness.op, harness.input("x", x)))
    assert {f"mlp.{k}" for k in ref.state_dict()} <= set(harness.graph.initializers)
    np.testing.assert_allclose(got, _reference(ref, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("n_group", "topk_group", "norm"), [(4, 2, True), (1, 1, False), (2, 1, True)]
)
def test_deepseek_v3_sigmoid_group_router(harness, load, rng, n_group, topk_group, norm):
    config = DeepseekV3Config(
        hidden_size=H,
        moe_intermediate_size=INTER,
        n_routed_experts=E,
        num_experts_per_tok=3,
        n_group=n_group,
        topk_group=topk_group,
        n_shared_experts=2,
        routed_scaling_factor=2.5,
        norm_topk_prob=norm,
        num_attention_heads=2,
    )
    ref = _random(DeepseekV3MoE(config))
    x = rng.standard_normal((2, 6, H)).astype(np.float32)
    router = SigmoidGroupRouter(
        H,
        E,
        top_k=3,
        n_group=n_group,
        topk_group=topk_group,
        routed_scaling_factor=2.5,
        norm_topk_prob=norm,
    )
    moe = MoE(
        router,
        Experts(E, H, INTER),
        shared_expert=GatedMLP(H, 2 * INTER),
        shared_name="shared_experts",
        name="mlp",
    )
    load(moe, _state(ref))
    (got,) = harness.run(moe(harness.op, harness.input("x", x)))
    assert "mlp.gate.e_score_correction_bias" in harness.graph.initializers
    np.testing.assert_allclose(got, _reference(ref, x), atol=1e-5, rtol=1e-5)
