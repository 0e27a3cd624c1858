"""LongT5: the encoder's blocks padded to a whole number for every length, with no branch on it.

The local and transient-global attentions split the sequence into blocks of
``local_radius + 1`` tokens through module-level functions. ``_split_into_blocks`` pads to a whole
number of blocks only ``if length % block != 0``: torch.export keeps the traced branch and guards
on it, so the trace held for every length but the block's multiples (129 tokens, 258, ...).
Here every length is padded with zeros to whole blocks plus one more block: at least two blocks
at any length, as torch.export specialises a count of 0 or 1 (one block at the traced length would
hold the graph to one block's length). The extra block is what HF's three-block concatenation
already puts after the last block (zero keys and values, masked out), so every block that HF
computes, padding rows included, sees the same keys, values and mask; the extra block's own rows
are cut off with the padding (``attn_output[:, :seq_length]``).

Transient-global attention also branches on ``num_globals = length // global_block_size > 0``
in ``_make_global_fixed_block_ids`` (no global block below one block's length). HF's function is
called here on a mask with one more block of padding tokens, which makes the count at least one
without changing any id: padding tokens get block id -1 and close no block, and the extra
global block's segment is cut off again (``length // global_block_size`` columns).

Its ``_create_global_aggregates`` builds ``torch.tensor(global_seq_len)`` from the (symbolic) block
count, which has no value on meta; the same one-hot sum is taken here by comparing each token's
block id with the block indices (a padding token's -1 matches none, as HF's dropped extra class).

These functions are module globals that the attention modules call, so they are swapped for the
duration of the stack's forward only (as for BLT's hashes).
"""

from __future__ import annotations

import functools
import sys
from unittest import mock

import torch


def _blocks(x: torch.Tensor, block_len: int, dim: int) -> torch.Tensor:
    """``x`` zero-padded along ``dim`` to whole blocks plus one and split:
    ``[..., blocks, block_len, ...]``."""
    dim = dim % x.ndim
    length = x.shape[dim]
    blocks = (length + 2 * block_len - 1) // block_len
    widths = [0, 0] * (x.ndim - dim - 1) + [0, blocks * block_len - length]
    x = torch.nn.functional.pad(x, widths)
    return x.reshape(*x.shape[:dim], blocks, block_len, *x.shape[dim + 1 :])


def _global_ids_without_branch(hf_global_ids):
    """HF's ``_make_global_fixed_block_ids``, called with at least one global block."""

    def global_ids(
        attention_mask: torch.Tensor, global_block_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        length = attention_mask.shape[1]
        padded = torch.nn.functional.pad(attention_mask, (0, global_block_size))  # 0: padding
        block_ids, segment_ids = hf_global_ids(padded, global_block_size)
        return block_ids[:, :length], segment_ids[:, : length // global_block_size]

    return global_ids


def _global_aggregates(
    hidden_states: torch.Tensor, block_ids: torch.Tensor, global_seq_len: int
) -> torch.Tensor:
    """The sum of each global block's token states: ``[..., global_seq_len, hidden]``."""
    blocks = torch.arange(global_seq_len, device=block_ids.device)
    members = (block_ids[..., None] == blocks).to(hidden_states.dtype)  # [..., tokens, blocks]
    return torch.einsum("...nd,...ng->...gd", hidden_states, members)


def blocks_without_branch(module: torch.nn.Module) -> None:
    """``LongT5Stack``: HF's forward with the functions above in place of its own."""
    hf = sys.modules[type(module).__module__]
    forward = module.forward

    @functools.wraps(forward)
    def blocked_forward(*args, **kwargs):
        with (
            mock.patch.object(hf, "_split_into_blocks", _blocks),
            mock.patch.object(
                hf,
                "_make_global_fixed_block_ids",
                _global_ids_without_branch(hf._make_global_fixed_block_ids),
            ),
            mock.patch.object(hf, "_create_global_aggregates", _global_aggregates),
        ):
            return forward(*args, **kwargs)

    module.forward = blocked_forward
