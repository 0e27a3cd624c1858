"""Moving each row's valid tokens first, with a 0/1 matrix of static shape: the batched form of
a Python loop over the batch that selects a row's tokens by its boolean mask."""

from __future__ import annotations

import torch


def valid_first(valid: torch.Tensor) -> torch.Tensor:
    """``P[b, j, i] = 1`` when token ``i`` of row ``b`` goes to slot ``j``: the row's valid tokens
    (``valid`` true, ``[batch, tokens]``) first in their order, then the others in theirs.

    ``einsum("bji,bi...->bj...", P, x)`` moves each value unchanged (one product by 1, the rest
    by 0); ``P & valid[:, None, :]`` keeps the valid tokens only, leaving zeros after them."""
    valid_rank = torch.cumsum(valid.to(torch.int64), dim=1) - 1
    other_rank = torch.cumsum((~valid).to(torch.int64), dim=1) - 1
    count = valid_rank[:, -1:] + 1
    slot = torch.where(valid, valid_rank, count + other_rank)  # [batch, tokens]
    slots = torch.arange(valid.size(1), device=valid.device)
    return slot[:, None, :] == slots[None, :, None]
