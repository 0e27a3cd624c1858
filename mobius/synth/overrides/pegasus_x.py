"""PEGASUS-X: the encoder's input padded to whole blocks before HF's forward, with no branch.

``PegasusXEncoder.forward`` pads the embedded tokens to a multiple of ``block_size`` only
``if seq_len % block_size != 0``: torch.export keeps the traced branch and guards on it, so the
trace held for every length but the block's multiples (512 tokens, 1024, ...).

Here the token embeddings and the mask are padded first, to whole blocks plus one more block
(at least two blocks at any length: torch.export specialises a count of 0 or 1), by a length
that is a multiple of the block by construction, so HF's test is false for every length and
its own padding does nothing. The padding tokens have mask 0, which HF turns into the same
minimum it pads its mask with, so no real or padding token of the input attends to them; the
positions HF adds to them and their own rows change nothing else and are cut off again.
"""

from __future__ import annotations

import functools
from typing import Any

import torch


def padded_to_blocks(module: torch.nn.Module) -> None:
    """``PegasusXEncoder``: HF's forward on inputs already padded to whole blocks."""
    forward = module.forward
    block = module.config.block_size

    @functools.wraps(forward)
    def blocked_forward(
        input_ids: Any = None, attention_mask: Any = None, inputs_embeds: Any = None, **kwargs
    ):
        if inputs_embeds is None:
            inputs_embeds = module.embed_tokens(input_ids)
        length = inputs_embeds.shape[1]
        if attention_mask is None:
            attention_mask = inputs_embeds.new_ones(inputs_embeds.shape[:2])
        padded = (length + 2 * block - 1) // block * block
        inputs_embeds = torch.nn.functional.pad(inputs_embeds, (0, 0, 0, padded - length))
        attention_mask = torch.nn.functional.pad(attention_mask, (0, padded - length))
        out = forward(inputs_embeds=inputs_embeds, attention_mask=attention_mask, **kwargs)
        if isinstance(out, tuple):
            return (out[0][:, :length], *out[1:])
        out.last_hidden_state = out.last_hidden_state[:, :length]
        return out

    module.forward = blocked_forward
