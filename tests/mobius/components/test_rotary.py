import numpy as np
import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from mobius.components import ApplyRotary, DynamicRotaryTable, RotaryTable, rope_parameters

HEAD_DIM, MAX_POS = 16, 64

ROPES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    "linear_partial": {
        "rope_type": "linear",
        "rope_theta": 500.0,
        "factor": 3.0,
        "partial_rotary_factor": 0.5,
    },
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0},
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    "yarn": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    "yarn_mscale": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 40.0,
        "mscale": 1.0,
        "mscale_all_dim": 0.707,
        "beta_fast": 32,
        "beta_slow": 1,
        "original_max_position_embeddings": 16,
    },
    "longrope": {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
        "long_factor": [1.2, 1.9, 2.7, 4.0, 5.5, 7.0, 9.0, 12.0],
        "original_max_position_embeddings": 16,
    },
}


def _config(rope: dict) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POS,
        rope_parameters=dict(rope),
    )


@pytest.mark.parametrize("name", list(ROPES))
def test_rope_parameters_match_hf(name):
    rope = ROPES[name]
    config = _config(rope)
    if rope["rope_type"] == "default":
        inv_freq, scaling = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config)
    params = rope_parameters(rope, HEAD_DIM, MAX_POS)
    assert params.inv_freq.dtype == np.float32
    np.testing.assert_allclose(params.inv_freq, inv_freq.numpy(), rtol=1e-6)
    assert params.attention_scaling == pytest.approx(scaling)
    if rope["rope_type"] == "longrope":
        long_freq, _ = ROPE_INIT_FUNCTIONS["longrope"](config, seq_len=17)
        np.testing.assert_allclose(params.long_inv_freq, long_freq.numpy(), rtol=1e-6)


# Lengths chosen around the switch points: MAX_POS (dynamic) and original_max_position_embeddings (longrope).
@pytest.mark.parametrize("name", list(ROPES))
@pytest.mark.parametrize("length", [5, 17, 100])
def test_rotary_table_matches_hf_module(harness, name, length):
    rope = ROPES[name]
    hf = LlamaRotaryEmbedding(_config(rope)).eval()  # fresh: HF's dynamic rope is stateful
    offsets = np.array([[0], [3]], dtype=np.int64)  # two rows, different starts (a padded batch)
    position_ids = offsets + np.arange(length, dtype=np.int64)[None, :]
    table = RotaryTable.from_parameters(rope_parameters(rope, HEAD_DIM, MAX_POS), name="rotary_emb")
    cos, sin = table(harness.op, harness.input("position_ids", position_ids))
    got_cos, got_sin = harness.run(cos, sin)
    x = torch.zeros(1, dtype=torch.float32)
    ref_cos, ref_sin = (t.numpy() for t in hf(x, torch.from_numpy(position_ids)))
    half = ref_cos.shape[-1] // 2
    np.testing.assert_array_equal(
        ref_cos[..., :half], ref_cos[..., half:]
    )  # HF duplicates the halves
    np.testing.assert_allclose(got_cos, ref_cos[..., :half], atol=2e-5)
    np.testing.assert_allclose(got_sin, ref_sin[..., :half], atol=2e-5)
    if not isinstance(table, DynamicRotaryTable):
        names = {"rotary_emb.inv_freq"} | (
            {"rotary_emb.long_inv_freq"} if rope["rope_type"] == "longrope" else set()
        )
        assert names <= set(harness.graph.initializers)


def _rotary_inputs(rng, rotary_dim, b=2, h=3, s=5, d=HEAD_DIM):
    q = rng.standard_normal((b, h, s, d)).astype(np.float32)
    angles = rng.uniform(0, 6.3, (b, s, rotary_dim // 2)).astype(np.float32)
    return q, np.cos(angles), np.sin(angles)


def test_apply_rotary_llama(harness, rng):
    q, cos, sin = _rotary_inputs(rng, HEAD_DIM)
    y = ApplyRotary()(
        harness.op, harness.input("q", q), harness.input("cos", cos), harness.input("sin", sin)
    )
    (got,) = harness.run(y)
    full_cos, full_sin = (torch.from_numpy(np.concatenate([t, t], -1)) for t in (cos, sin))
    expected, _ = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(q), full_cos, full_sin)
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)


def test_apply_rotary_partial(harness, rng):
    rotary_dim = HEAD_DIM // 4
    q, cos, sin = _rotary_inputs(rng, rotary_dim)
    y = ApplyRotary(rotary_dim)(
        harness.op, harness.input("q", q), harness.input("cos", cos), harness.input("sin", sin)
    )
    (got,) = harness.run(y)
    full_cos, full_sin = (torch.from_numpy(np.concatenate([t, t], -1)) for t in (cos, sin))
    expected, _ = neox_apply(torch.from_numpy(q), torch.from_numpy(q), full_cos, full_sin)
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)
    np.testing.assert_array_equal(got[..., rotary_dim:], q[..., rotary_dim:])


@pytest.mark.parametrize("rotary_dim", [HEAD_DIM, 8])
def test_apply_rotary_gptj_interleaved(harness, rng, rotary_dim):
    b, h, s = 2, 3, 5
    q = rng.standard_normal((b, h, s, HEAD_DIM)).astype(np.float32)
    position_ids = np.array([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]], dtype=np.int64)
    sincos = create_sinusoidal_positions(32, rotary_dim)[
        torch.from_numpy(position_ids)
    ]  # GPT-J's own table
    sin, cos = torch.split(sincos, rotary_dim // 2, dim=-1)
    y = ApplyRotary(rotary_dim, interleaved=True)(
        harness.op,
        harness.input("q", q),
        harness.input("cos", cos.numpy()),
        harness.input("sin", sin.numpy()),
    )
    (got,) = harness.run(y)
    q_bshd = torch.from_numpy(q).transpose(1, 2)  # GPT-J rotates [batch, seq, heads, dim]
    rot = gptj_apply(q_bshd[..., :rotary_dim], sin, cos)
    expected = torch.cat([rot, q_bshd[..., rotary_dim:]], dim=-1).transpose(1, 2)
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)


def test_table_and_apply_end_to_end_f16(harness, rng):
    """RotaryTable -> ApplyRotary in float16 against HF's module and apply_rotary_pos_emb."""
    rope = ROPES["llama3"]
    hf = LlamaRotaryEmbedding(_config(rope))
    q = rng.standard_normal((1, 2, 6, HEAD_DIM)).astype(np.float16)
    position_ids = np.arange(6, dtype=np.int64)[None, :] + 40
    table = RotaryTable.from_parameters(
        rope_parameters(rope, HEAD_DIM, MAX_POS), dtype=harness.input("q", q).dtype
    )
    cos, sin = table(harness.op, harness.input("position_ids", position_ids))
    (got,) = harness.run(ApplyRotary()(harness.op, harness.graph.inputs[0], cos, sin))
    qt = torch.from_numpy(q)
    ref_cos, ref_sin = hf(qt, torch.from_numpy(position_ids))
    expected, _ = apply_rotary_pos_emb(qt.float(), qt.float(), ref_cos.float(), ref_sin.float())
    np.testing.assert_allclose(got.astype(np.float32), expected.numpy(), atol=1e-2)


def test_existing_inv_freq_value(harness):
    params = rope_parameters(ROPES["default"], HEAD_DIM)
    table = RotaryTable(attention_scaling=1.0, inv_freq=harness.weight("inv", params.inv_freq))
    position_ids = np.arange(4, dtype=np.int64)[None, :]
    cos, _ = table(harness.op, harness.input("position_ids", position_ids))
    (got,) = harness.run(cos)
    np.testing.assert_allclose(got, np.cos(position_ids[..., None] * params.inv_freq), atol=1e-6)
