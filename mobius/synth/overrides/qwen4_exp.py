"""Qwen4-Exp: the QSA indexer's token selection, batched over batch rows and queries."""

from __future__ import annotations

import math
import sys

import torch

from mobius.errors import UnsupportedError


def _rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[b, index[b, ...]]`` for a [batch, n, ...] table: one Gather on the flattened rows."""
    batch, n = table.shape[:2]
    offsets = torch.arange(batch, device=index.device).view(-1, *([1] * (index.dim() - 1))) * n
    flat = table.reshape(batch * n, *table.shape[2:]).index_select(0, (index + offsets).flatten())
    return flat.reshape(*index.shape, *table.shape[2:])


def batched_selection(module: torch.nn.Module) -> None:
    # Qwen4ExpTextQSAIndexer.forward loops in Python over the batch and over every query, takes
    # each row's visible keys with nonzero() (a data-dependent length) and branches on how many
    # complete blocks it found: torch.export cannot trace that for a symbolic batch and length.
    # The same selection for all rows at once: each row's visible keys are ranked (cumsum) and
    # scattered to the front of an order (visible first, in key order), which cut into blocks of
    # compress_ratio gives HF's block_token_indices (the incomplete last ones are padding and are
    # never chosen). Blocks are pooled, normed and rotated as HF does, scored per row, and the
    # best block_topk complete ones (plus the tail after the last complete block) make the mask.
    # It reads the 4-D mask, so it only traces with the model's own attention (the captured one
    # removes the mask): prepare falls back to that. HF only runs with one indexer key head.
    # Equal scores: ONNX TopK keeps the lowest block, torch.topk an unspecified one. The gathered
    # block keys are [batch, queries, keys, dim]: small for the one-token steps hybrid models run.
    if module.index_kv_heads != 1:
        return
    rotary = sys.modules[type(module).__module__].apply_rotary_pos_emb  # HF's, queries only
    heads, dim = module.index_n_heads, module.index_head_dim
    ratio, top = module.compress_ratio, module.block_topk

    def forward(hidden_states, position_embeddings, attention_mask, cache=None, **kwargs):
        batch, length, _ = hidden_states.shape
        full_cos, full_sin = position_embeddings
        cos, sin = full_cos[:, -length:, :], full_sin[:, -length:, :]
        q, keys = torch.split(module.index_qk_proj(hidden_states), [heads * dim, dim], dim=-1)
        q = module.q_layernorm(q.reshape(batch, length, heads, dim))
        q = rotary(q, cos=cos, sin=sin, unsqueeze_dim=2)
        if cache is not None:
            keys = cache.update_indexer(keys, module.layer_idx)

        if attention_mask is None:
            raise UnsupportedError(  # with the captured attention: the chain falls back
                "the QSA indexer selects keys from the 4-D attention mask, absent here"
            )
        mask = attention_mask[:, 0]
        visible = mask if mask.dtype == torch.bool else mask == 0  # [batch, queries, keys]
        total = visible.shape[-1]
        seen = visible.to(torch.int64)
        rank = seen.cumsum(-1) - 1  # a visible key's place among the row's visible keys
        count = seen.sum(-1, keepdim=True)
        slot = torch.where(visible, rank, count + (1 - seen).cumsum(-1) - 1)  # a permutation
        order = torch.arange(total, device=visible.device).expand_as(slot)
        order = torch.zeros_like(slot).scatter(-1, slot, order)  # visible keys first, in order
        blocks = total // ratio + 1  # one more than can be complete: never empty
        order = torch.cat([order, order.new_zeros(*order.shape[:-1], ratio)], dim=-1)
        members = order[..., : blocks * ratio].reshape(*order.shape[:-1], blocks, ratio)

        grouped = _rows(keys, members)  # [batch, queries, blocks, ratio, dim]
        pooled = module.k_layernorm(grouped.float().mean(dim=-2).to(keys.dtype))
        starts = members[..., 0]
        block_cos, block_sin = _rows(full_cos, starts), _rows(full_sin, starts)
        block_keys = rotary(pooled.unsqueeze(-2), cos=block_cos, sin=block_sin, unsqueeze_dim=-2)
        block_keys = block_keys.squeeze(-2)
        scores = torch.matmul(
            q.float(), block_keys.float().transpose(-1, -2)
        )  # [b, q, heads, blocks]
        scores = torch.relu(scores).sum(dim=2) / math.sqrt(dim)

        complete = count // ratio
        block_ids = torch.arange(blocks, device=visible.device)
        scores = torch.where(block_ids < complete, scores, float("-inf"))
        padding = scores.new_full((*scores.shape[:-1], top), float("-inf"))  # top <= candidates
        chosen = torch.cat([scores, padding], dim=-1).topk(top, dim=-1).indices
        chosen = torch.where(chosen < complete, chosen, blocks)  # drop incomplete and padding
        picked = visible.new_zeros(*visible.shape[:-1], blocks + 1).scatter(-1, chosen, True)

        in_block = picked.gather(-1, torch.div(rank.clamp(min=0), ratio, rounding_mode="floor"))
        tail = rank >= complete * ratio
        return (visible & (in_block | tail)).unsqueeze(1)

    module.forward = forward
