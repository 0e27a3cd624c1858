"""CPM-Ant: the padding count kept symbolic in the sequence length."""

from __future__ import annotations

import torch


def padding_by_arange(module: torch.nn.Module) -> None:
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
