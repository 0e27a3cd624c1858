"""LTX-2's diffusion video decoder: its neighborhood attention as one dense attention under a
boolean window mask built in the graph; its feed-forward in one call over every token."""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F


def axis_window(positions: torch.Tensor, kernel: int) -> torch.Tensor:
    """``[n, n]`` bool: key ``j`` lies in query ``i``'s window along one axis of ``n`` positions
    (``positions`` is ``arange(n)``). The window holds ``kernel`` positions, centred on the query
    where it fits and shifted inward at the borders (``_neighborhood_block_mask``'s
    ``clamp(q - kernel // 2, 0, n - kernel)``); ``n - kernel`` is read from the last position, so
    ``n`` stays symbolic."""
    start = torch.minimum((positions - kernel // 2).clamp(min=0), positions[-1:] - (kernel - 1))
    keys = positions[None, :]
    return (keys >= start[:, None]) & (keys < start[:, None] + kernel)


def neighborhood_mask(
    frames: int, height: int, width: int, kernel: tuple, device: Any
) -> torch.Tensor:
    """``[tokens, tokens]`` bool over the ``frames x height x width`` grid flattened frame-major,
    as the flex ``BlockMask``'s ``mask_mod`` defines it: a key is attended when it lies in the
    query's window on all three axes."""
    windows = [axis_window(torch.arange(n, device=device), k)
               for n, k in zip((frames, height, width), kernel, strict=True)]  # fmt: skip
    return grid_mask(*windows)


def grid_mask(frames: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """``[cells, cells]`` bool over a ``t x h x w`` grid flattened frame-major, from one
    ``[n, n]`` mask per axis: cell ``j`` is attended from cell ``i`` when it is on all three."""
    mask = frames[:, None, None, :, None, None] & rows[None, :, None, None, :, None]
    mask = mask & columns[None, None, :, None, None, :]
    cells = frames.shape[0] * rows.shape[0] * columns.shape[0]
    return mask.reshape(cells, cells)


class DenseNeighborhoodAttnProcessor:
    """``LTX2VideoVaeNeighborhoodAttnProcessor`` with ``scaled_dot_product_attention`` under
    ``neighborhood_mask`` in place of flex attention under a ``BlockMask``.

    A ``BlockMask`` is built by ``create_block_mask`` from a Python ``mask_mod`` at the grid's
    int sizes and consumed by ``flex_attention``, neither of which torch.export can put in a
    graph with dynamic sizes. The same window as a boolean mask gives the same softmax (a masked
    key weighs 0; no query's window is empty). The mask is ``tokens^2`` booleans and the scores
    ``heads x tokens^2``: memory grows with the square of the grid, as flex's unfused CPU path
    does."""

    def __call__(
        self, attn: Any, hidden_states: torch.Tensor, block_mask: Any = None
    ) -> torch.Tensor:
        batch_size, frames, height, width, _ = hidden_states.shape
        query, key, value = attn.project_qkv(hidden_states)
        query, key, value = (
            x.reshape(batch_size, frames * height * width, attn.heads, attn.head_dim).transpose(
                1, 2
            )
            for x in (query, key, value)
        )
        mask = neighborhood_mask(frames, height, width, attn.kernel_size, hidden_states.device)
        # scale 1: project_qkv has scaled the query, as the model's processor assumes
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=1.0)
        out = out.transpose(1, 2).reshape(
            batch_size, frames, height, width, attn.heads * attn.head_dim
        )
        return attn.to_out[0](out)


def dense_window_attention(module: torch.nn.Module) -> None:
    """Install the dense processor; no ``BlockMask`` is built (``build_block_mask`` gives None,
    as it does for the NATTEN processor, which takes none either)."""
    module.set_processor(DenseNeighborhoodAttnProcessor())
    module.build_block_mask = types.MethodType(lambda self, hidden_states: None, module)


def untiled_feed_forward(module: torch.nn.Module) -> None:
    # LTX2VideoVaeSwiGLU runs in tiles of 16384 tokens past that count (`if num_tokens <=
    # _SWIGLU_TILE_SIZE`, then a Python range over the tokens), only to bound memory: the MLP is
    # pointwise across tokens, so one call is the same computation; the branch on the symbolic
    # token count would bound the grid.
    def forward(self: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(hidden_states)) * self.w_up(hidden_states))

    module.forward = types.MethodType(forward, module)
