"""Replacements for HF methods that are wrong in the form mobius traces: one entry per class.

Each entry says why. They install on the instance (``make_traceable``), never on the class.
"""

from __future__ import annotations

from collections.abc import Callable

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


def _rwkv_attention_mix(module: torch.nn.Module) -> None:
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


def _rwkv_feed_forward_mix(module: torch.nn.Module) -> None:
    # the same single-token broadcast as in _rwkv_attention_mix, in the channel-mixing block
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


def _rwkv_rescaled_at_use(module: torch.nn.Module) -> None:
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


def _cpmant_padding_by_arange(module: torch.nn.Module) -> None:
    # CPM-Ant counts its left padding with torch.tensor(list(range(seqlen - prompt_length))), a
    # Python list as long as the sequence: torch.export fixes the sequence length to the traced
    # one. The same descending positions come from an arange, which keeps the length symbolic.
    prompt = module.prompt_length

    def prepare_attention_mask(input_ids, span, context, length):
        batch, seqlen = input_ids.shape
        positions = torch.arange(seqlen, device=input_ids.device)
        causal = positions <= positions.view(-1, 1)
        mask = context[:, None, :] | (context[:, :, None].logical_not() & causal[None])
        mask = mask & (span[:, None, :] == span[:, :, None])
        from_end = torch.arange(seqlen - prompt - 1, -1, -1, device=input_ids.device)
        real = from_end[None, :].expand(batch, -1) < length[:, None]
        prompt_part = torch.ones(batch, prompt, dtype=torch.bool, device=input_ids.device)
        real = torch.cat((prompt_part, real), dim=1)
        return real[:, :, None] & real[:, None, :] & mask

    module._prepare_attention_mask = prepare_attention_mask


OVERRIDES: dict[str, Callable[[torch.nn.Module], None]] = {
    "transformers.models.cpmant.modeling_cpmant.CpmAntModel": _cpmant_padding_by_arange,
    "transformers.models.rwkv.modeling_rwkv.RwkvSelfAttention": _rwkv_attention_mix,
    "transformers.models.rwkv.modeling_rwkv.RwkvFeedForward": _rwkv_feed_forward_mix,
    "transformers.models.rwkv.modeling_rwkv.RwkvModel": _rwkv_rescaled_at_use,
}


def install_overrides(model: torch.nn.Module) -> None:
    """Install every entry that names the class of one of ``model``'s modules."""
    for module in model.modules():
        cls = type(module)
        found = OVERRIDES.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            found(module)
