"""Kandinsky 6's SR transformer: its NABLA attention as one dense attention under the boolean mask
of the kept 64-token blocks, built in the graph; its sliding-tile prior from each axis's own
positions (its rotary grid: ``kandinsky6.rotary_grid_by_shape``).

``Kandinsky6SRAttnProcessor`` picks, per batch row and head, the blocks of 64 tokens (8x8 token
squares of one frame) each block of queries attends to: the blocks whose mean-pooled scores,
softmaxed and sorted, reach ``1 - threshold`` in cumulative sum, or'ed with the static
sliding-tile prior ``sta_mask``. It hands them to flex attention as a ``BlockMask`` of full blocks
with no ``mask_mod``. PyTorch's eager flex attention ignores a ``BlockMask``'s blocks (it applies
only ``mask_mod``) and computes full attention; compiled, flex computes the block-sparse attention
the model is designed and run for (diffusers' processor says it is meant to run compiled). The
graph computes the block-sparse one: every query of block ``i`` attends to every key of each kept
block ``j`` of row ``i``, as SDPA under the block mask expanded by 64 on both axes. The same
processor gives the PyTorch reference (``block_sparse_reference``): eager diffusers is not it.

The mask is ``batch x heads x tokens^2`` booleans and the scores as many floats: memory grows with
the square of the token count (a 13x32x48 latent grid is 20k tokens), where the compiled kernel
skips the dropped blocks.

``sliding_tile_mask``, a module global the model's forward calls, cuts the three axes' distance
tables from one table over ``max(frames, block rows, block columns)`` positions: Python's max of
traced sizes picks one axis at trace (frames, at 5 frames of 3x5 blocks), and the graph failed at
grids with more block rows or columns than frames. Each axis's table from its own positions is the
same mask; it is swapped in for the duration of the model's forward.
"""

from __future__ import annotations

import functools
import math
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F

from mobius.diffusers.overrides.ltx2_decoder import grid_mask

# the processor's block of tokens: FRACTAL_BLOCK_SIZE x FRACTAL_BLOCK_SIZE of one frame
BLOCK_TOKENS = 64


def kept_blocks(
    query: torch.Tensor, key: torch.Tensor, sta: torch.Tensor, threshold: float
) -> torch.Tensor:
    """``[batch, heads, blocks, blocks]`` bool: key block ``j`` is kept for query block ``i``.
    ``query``/``key`` are ``[batch, heads, tokens, head_dim]``; the selection is
    ``nabla_block_mask``'s, before it becomes a ``BlockMask``."""
    batch, heads, tokens, dim = query.shape
    blocks = tokens // BLOCK_TOKENS
    pooled_q = query.reshape(batch, heads, blocks, BLOCK_TOKENS, dim).mean(-2)
    pooled_k = key.reshape(batch, heads, blocks, BLOCK_TOKENS, dim).mean(-2)
    scores = torch.softmax(pooled_q @ pooled_k.transpose(-2, -1) / math.sqrt(dim), dim=-1)
    ascending, order = scores.sort(-1)
    reached = (ascending.cumsum(-1) >= 1 - threshold).gather(-1, order.argsort(-1))
    return reached | sta


def block_attention_mask(blocks: torch.Tensor) -> torch.Tensor:
    """``[..., blocks, blocks]`` bool → ``[..., tokens, tokens]``: each entry repeated over its
    64 x 64 tokens."""
    *lead, rows, cols = blocks.shape
    expanded = blocks[..., :, None, :, None].expand(*lead, rows, BLOCK_TOKENS, cols, BLOCK_TOKENS)
    return expanded.reshape(*lead, rows * BLOCK_TOKENS, cols * BLOCK_TOKENS)


class BlockSparseDenseAttnProcessor:
    """``Kandinsky6SRAttnProcessor`` with SDPA under the kept blocks' dense mask in place of flex
    attention under a ``BlockMask`` (flex's default scale, ``1/sqrt(head_dim)``, is SDPA's)."""

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        rotary_emb: torch.Tensor,
        sparse_params: dict[str, Any],
    ) -> torch.Tensor:
        from diffusers.models.transformers.transformer_kandinsky6_sr import apply_rotary

        query = attn.to_query(hidden_states).unflatten(-1, (attn.num_heads, -1))
        key = attn.to_key(hidden_states).unflatten(-1, (attn.num_heads, -1))
        value = attn.to_value(hidden_states).unflatten(-1, (attn.num_heads, -1))
        query = attn.query_norm(query.float()).type_as(query)
        key = attn.key_norm(key.float()).type_as(key)
        query = apply_rotary(query, rotary_emb).transpose(1, 2)
        key = apply_rotary(key, rotary_emb).transpose(1, 2)
        value = value.transpose(1, 2)
        blocks = kept_blocks(query, key, sparse_params["sta_mask"], sparse_params["threshold"])
        mask = block_attention_mask(blocks)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
        return attn.out_layer(out.transpose(1, 2).flatten(2, 3))


def block_sparse_attention(module: torch.nn.Module) -> None:
    """Install the dense-mask processor on a ``Kandinsky6SRAttention``."""
    module.set_processor(BlockSparseDenseAttnProcessor())


def block_sparse_reference(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (a ``Kandinsky6SRTransformer3DModel``) computing the block-sparse attention in
    PyTorch, the reference a graph is compared with; returned for chaining."""
    from diffusers.models.transformers.transformer_kandinsky6_sr import Kandinsky6SRAttention

    for module in model.modules():
        if isinstance(module, Kandinsky6SRAttention):
            block_sparse_attention(module)
    return model


def sliding_tile_mask(
    num_frames: int, height: int, width: int, window: tuple[int, int, int], device: Any
) -> torch.Tensor:
    """diffusers' ``sliding_tile_mask`` (block ``j`` near block ``i`` when within half of
    ``window``'s extent on every axis) with each axis's distances from its own positions."""

    def near(size: int, extent: int) -> torch.Tensor:
        positions = torch.arange(size, device=device)
        return (positions[:, None] - positions[None, :]).abs() <= extent // 2

    return grid_mask(
        *(near(n, e) for n, e in zip((num_frames, height, width), window, strict=True))
    )


def sliding_tile_prior_by_axes(module: torch.nn.Module) -> None:
    """Run the model's forward with ``sliding_tile_mask`` above in place of diffusers'."""
    from diffusers.models.transformers import transformer_kandinsky6_sr

    forward = module.forward

    @functools.wraps(forward)
    def forward_by_axes(*args: Any, **kwargs: Any) -> Any:
        with mock.patch.object(transformer_kandinsky6_sr, "sliding_tile_mask", sliding_tile_mask):
            return forward(*args, **kwargs)

    module.forward = forward_by_axes
