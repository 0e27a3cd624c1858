"""RWKV (v4): single-token state mixing that broadcasts over the batch, and in-place weight rescaling."""

from __future__ import annotations

import torch


def _shifted(module: torch.nn.Module, hidden: torch.Tensor, state: list | None, slot: int):
    """``hidden`` delayed by one token; the first position takes the previous call's last token."""
    shifted = module.time_shift(hidden)
    if state is not None:
        shifted[:, 0] = state[slot][:, :, module.layer_id]
    return shifted


def _mixed(hidden: torch.Tensor, shifted: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RWKV's token shift: each channel's mix of this token and the previous one (as HF writes it)."""
    return hidden * weight + shifted * (1 - weight)


def attention_mix(module: torch.nn.Module) -> None:
    # RWKV's single-token branch takes the shifted token as [batch, hidden] and adds it to
    # [batch, 1, hidden]: [batch, batch, hidden] for a batch over 1. The multi-token branch is right
    # for one token too, and one-token graphs (token_loop.py) run every step through it.
    def extract_key_value(hidden, state=None):
        shifted = _shifted(module, hidden, state, 1)
        key = _mixed(hidden, shifted, module.time_mix_key)
        value = _mixed(hidden, shifted, module.time_mix_value)
        receptance = _mixed(hidden, shifted, module.time_mix_receptance)
        key, value = module.key(key), module.value(value)
        receptance = torch.sigmoid(module.receptance(receptance))
        if state is not None:
            state[1][:, :, module.layer_id] = hidden[:, -1]
        return receptance, key, value, state

    module.extract_key_value = extract_key_value


def feed_forward_mix(module: torch.nn.Module) -> None:
    # the same single-token broadcast as in attention_mix, in the channel-mixing block
    def forward(hidden, state=None):
        shifted = _shifted(module, hidden, state, 0)
        key = _mixed(hidden, shifted, module.time_mix_key)
        receptance = _mixed(hidden, shifted, module.time_mix_receptance)
        value = module.value(torch.square(torch.relu(module.key(key))))
        receptance = torch.sigmoid(module.receptance(receptance))
        if state is not None:
            state[0][:, :, module.layer_id] = hidden[:, -1]
        return receptance * value, state

    module.forward = forward


def rescaled_at_use(module: torch.nn.Module) -> None:
    # In eval mode RWKV divides its output weights by 2**(layer // rescale_every) in place on the
    # first call (and halves the hidden states every rescale_every layers). The graph binds the
    # checkpoint's weights as saved, so the division happens on the projections' outputs instead:
    # the same numbers, as both are exact powers of two (these projections have no bias)
    every = module.config.rescale_every
    if every <= 0:
        return
    module.layers_are_rescaled = True  # no in-place division of the weights

    def scaled(factor: int):
        return lambda _module, _args, out: out / factor

    for block_id, block in enumerate(module.blocks):
        for linear in (block.attention.output, block.feed_forward.value):
            linear.register_forward_hook(scaled(2 ** (block_id // every)))
