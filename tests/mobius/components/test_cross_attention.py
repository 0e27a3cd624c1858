"""Seq2seq attention components against the op's reference semantics: the decoder's causal mask
with the new tokens last, the padding mask of cross-attention, and an additive bias."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch

from mobius.components.cross_attention import BiasedAttention, Seq2SeqMask

LOWEST = float(np.finfo(np.float32).min)


def _reference(q, k, v, scale, mask):
    scores = q @ k.transpose(0, 1, 3, 2) * scale + mask
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    return (probs / probs.sum(-1, keepdims=True)) @ v


def test_causal_self_attention_over_past_and_new_keys_with_a_bias(harness):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)  # 2 new tokens after 3 cached
    k = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    v = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    bias = rng.standard_normal((1, 3, 2, 5)).astype(np.float32)  # T5's [1, heads, q, k]
    op = harness.op
    qv, kv, vv, bv = (harness.input(n, a) for n, a in zip("qkvb", (q, k, v, bias), strict=True))
    mask = Seq2SeqMask(causal=True)(
        op, None, op.Shape(qv, start=2, end=3), op.Shape(kv, start=2, end=3),
        ir.DataType.FLOAT, LOWEST,
    )  # fmt: skip
    (y,) = harness.run(BiasedAttention(0.5)(op, qv, kv, vv, mask, bv))
    allowed = np.arange(5)[None, :] <= np.arange(3, 5)[:, None]  # query i is position 3 + i
    expected = _reference(q, k, v, 0.5, bias + np.where(allowed, 0.0, LOWEST))
    assert np.abs(y - expected).max() < 1e-5
    # the op's own reference semantics agree (what the trace stands for)
    from patterns.seq2seq_attention import seq2seq_attention_op

    traced = seq2seq_attention_op(
        *(torch.from_numpy(a) for a in (q, k, v, bias)), 0.5, True, False, 0.0
    ).transpose(1, 2)
    assert np.abs(traced.numpy() - expected).max() < 1e-5


def test_cross_attention_masks_the_encoders_padding(harness):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    k = rng.standard_normal((2, 2, 6, 4)).astype(np.float32)
    v = rng.standard_normal((2, 2, 6, 4)).astype(np.float32)
    padding = np.ones((2, 6), dtype=np.int64)
    padding[1, 4:] = 0  # right-padded second row
    op = harness.op
    qv, kv, vv = (harness.input(n, a) for n, a in zip("qkv", (q, k, v), strict=True))
    pv = harness.input("padding", padding)
    mask = Seq2SeqMask(causal=False)(
        op, pv, op.Shape(qv, start=2, end=3), op.Shape(kv, start=2, end=3),
        ir.DataType.FLOAT, LOWEST,
    )  # fmt: skip
    (y,) = harness.run(BiasedAttention(0.5)(op, qv, kv, vv, mask))
    additive = np.where(padding[:, None, None, :] == 1, 0.0, LOWEST)
    assert np.abs(y - _reference(q, k, v, 0.5, additive)).max() < 1e-5
