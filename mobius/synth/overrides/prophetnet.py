"""ProphetNet: decoder positions counted from the cache length in the graph."""

from __future__ import annotations

from types import MethodType
from typing import Any

import torch


def positions_from_cache(module: torch.nn.Module) -> None:
    """``ProphetNetPositionalEmbeddings``: with a non-empty cache HF casts the new token's position
    (``padding_idx + past + 1``) to a Python ``int``, which fixes the cache length the graph holds
    for; the same position is computed from the length here. With an empty cache the two branches
    agree for one token (``cumsum`` of a one-column mask is 1), so the one-token decoder step
    (``tasks/seq2seq.ONE_TOKEN_DECODERS``) serves the first token too."""
    own = module.forward

    def forward(
        self: torch.nn.Module,
        inputs_shape: Any,
        device: Any,
        attention_mask: Any = None,
        cache: Any = None,
        position_ids: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if position_ids is not None or cache is None or cache.get_seq_length() == 0:
            return own(inputs_shape, device, attention_mask, cache, position_ids)
        past = cache.get_seq_length()  # HF's branch, without the int() that fixes it
        position = self.padding_idx + inputs_shape[1] + past
        position_ids = torch.ones((1, 1), dtype=torch.long, device=device) * position
        return self._forward(position_ids), position_ids

    module.forward = MethodType(forward, module)
