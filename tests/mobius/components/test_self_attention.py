"""SelfAttention (and Attention + CausalMask under it) against HF attention layers, with a cache."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
import torch

from mobius.components.attention import CausalMask
from mobius.components.self_attention import SelfAttention

CASES = {
    # model type: (config overrides, SelfAttention options)
    "llama": ({}, {}),
    "qwen2": ({}, {"qkv_bias": True}),  # q/k/v biases, no o bias
    "qwen3": ({"head_dim": 24}, {"qk_norm_eps": 1e-6}),  # per-head RMSNorm on q and k
    "phi3": ({"pad_token_id": 0}, {"fused_qkv": True}),  # one qkv_proj
}


def _hf_layer(model_type: str, overrides: dict):
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.for_model(
        model_type, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
        vocab_size=32, intermediate_size=32, **overrides,
    )  # fmt: skip
    config._attn_implementation = "eager"
    model = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)](config).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return model, config


@pytest.mark.parametrize("model_type", list(CASES))
def test_self_attention_with_cache_matches_hf(model_type, harness):
    overrides, options = CASES[model_type]
    model, config = _hf_layer(model_type, overrides)
    layer, rotary = model.model.layers[0].self_attn, model.model.rotary_emb
    head_dim = getattr(config, "head_dim", None) or 16
    batch, past, new = 2, 5, 3
    total = past + new
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(batch, total, 64, generator=gen)
    pad = torch.ones(batch, total, dtype=torch.int64)
    pad[0, :2] = 0  # left padding in the first row
    positions = (pad.cumsum(-1) - 1).clamp(min=0)
    cos, sin = rotary(hidden, positions)
    causal = torch.tril(torch.ones(total, total, dtype=torch.bool))
    allowed = causal[None, None] & pad.bool()[:, None, None, :]
    mask4 = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
    with torch.no_grad():
        expected, _ = layer(hidden, (cos, sin), mask4)

    h = harness
    component = SelfAttention(64, 4, 2, head_dim, name="self_attn", **options)
    state = {k: v.detach().numpy() for k, v in layer.state_dict().items()}
    component.load_state_dict({k: ir.tensor(v) for k, v in state.items()}, strict=True)
    half = cos.shape[-1] // 2
    x = h.input("hidden", hidden[:, past:].numpy())
    cos_in = h.input("cos", cos[:, past:, :half].numpy())
    sin_in = h.input("sin", sin[:, past:, :half].numpy())
    mask_in = h.input("attention_mask", pad.numpy())
    # the cache of the first `past` positions, as HF's layer computes it
    with torch.no_grad():
        k_past = _cache(layer, hidden[:, :past], cos[:, :past], sin[:, :past], "key", config)
        v_past = _cache(layer, hidden[:, :past], cos[:, :past], sin[:, :past], "value", config)
    past_k = h.input("past_key", k_past, static=True)
    past_v = h.input("past_value", v_past, static=True)
    mask = CausalMask()(
        h.op,
        mask_in,
        h.op.Shape(x, start=1, end=2),
        ir.DataType.FLOAT,
        float(np.finfo(np.float32).min),
    )
    out, present_k, _ = component(h.op, x, cos_in, sin_in, mask, past_k, past_v)
    got, got_k = h.run(out, present_k)
    keep = pad[:, past:].bool().numpy()
    np.testing.assert_allclose(got[keep], expected[:, past:].numpy()[keep], atol=1e-5, rtol=1e-5)
    assert got_k.shape == (batch, 2, total, head_dim)


def _cache(layer, hidden, cos, sin, kind, config):
    """HF's key or value states for ``hidden`` (after norm and rope, before repeat_kv)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    b, s, _ = hidden.shape
    head_dim = layer.head_dim
    if hasattr(layer, "qkv_proj"):
        qkv = layer.qkv_proj(hidden)
        q_size = config.num_attention_heads * head_dim
        kv = config.num_key_value_heads * head_dim
        k, v = qkv[..., q_size : q_size + kv], qkv[..., q_size + kv :]
    else:
        k, v = layer.k_proj(hidden), layer.v_proj(hidden)
    k = k.view(b, s, -1, head_dim)
    if hasattr(layer, "k_norm"):
        k = layer.k_norm(k)
    k, v = k.transpose(1, 2), v.view(b, s, -1, head_dim).transpose(1, 2)
    if kind == "value":
        return v.numpy()
    _, k = apply_rotary_pos_emb(k, k, cos, sin)
    return k.numpy()
