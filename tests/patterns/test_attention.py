"""When the mobius attention function captures a call and when it declines."""

from __future__ import annotations

import torch

from patterns.attention import mobius_attention_forward


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer_idx = 0
        self.is_causal = True


def qkv(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 4, 5, 16, generator=gen) for _ in range(3)]


def test_plain_causal_call_is_captured():
    layer = Layer()
    out, _ = mobius_attention_forward(layer, *qkv(), None, scaling=0.25)
    assert out.shape == (2, 5, 4, 16)
    assert not hasattr(layer, "_mobius_declined")


def test_module_built_mask_declines_and_keeps_the_mask():
    # under "mobius" the model-level mask is None, so a mask here is the module's own (a bias)
    layer = Layer()
    q, k, v = qkv()
    bias = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(1))
    out, _ = mobius_attention_forward(layer, q, k, v, bias, scaling=0.25)
    assert "own attention mask" in layer._mobius_declined
    expected = torch.softmax(q @ k.transpose(-1, -2) * 0.25 + bias, dim=-1) @ v
    torch.testing.assert_close(out, expected.transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_bidirectional_call_declines():
    layer = Layer()
    layer.is_causal = False
    mobius_attention_forward(layer, *qkv(), None, scaling=0.25)
    assert "bidirectional" in layer._mobius_declined
