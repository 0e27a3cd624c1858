"""``randomize``: which tensors get random values, and around what."""

from __future__ import annotations

import torch

from mobius.testing.tiny import randomize


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(8))  # a norm weight, starts at 1
        self.scale = torch.nn.Parameter(torch.full((8,), 0.02))  # an nGPT-style learned scale
        self.register_buffer("bias", torch.zeros(8))  # a router bias, starts at 0
        self.register_buffer("decay", torch.exp(-torch.arange(8.0)))  # a table derived from config
        self.register_buffer("scratch", torch.zeros(8), persistent=False)


def test_parameters_and_constant_buffers_are_randomised():
    block = randomize(Block())
    assert block.weight.std() > 0.1 and block.bias.std() > 0.1
    assert torch.equal(block.scratch, torch.zeros(8))  # not persistent: never saved, left alone
    # a derived table keeps the values the model relies on
    torch.testing.assert_close(block.decay, torch.exp(-torch.arange(8.0)))


def test_small_learned_scales_vary_around_their_start():
    scale = randomize(Block()).scale
    assert 0 < scale.std() < 0.02 and torch.all((scale > -0.03) & (scale < 0.07))
