"""Cosmos: the learnable position embedding, traceable at any size its tables cover."""

from __future__ import annotations

import math
import types

import torch


def norm_scale_from_width(module: torch.nn.Module) -> None:
    # CosmosLearnablePositionalEmbed scales eps by `np.sqrt(norm.numel() / emb.numel())`: the
    # norm keeps every axis of the embedding but its last, so the ratio is 1 / hidden_size, but
    # numpy cannot take the square root of the symbolic element counts torch.export traces with.
    # Its tables are sliced to the latents' size (`pos_emb_t[:frames]`): torch.export records the
    # slice's clamp at the table's length as a bound on the size; rows gathered by `arange`
    # are the same rows, and a size beyond the table fails at run time as it does in PyTorch.
    def forward(self: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
        batch_size, _, num_frames, height, width = hidden_states.shape
        t, h, w = (size // patch for size, patch in zip((num_frames, height, width),
                                                         self.patch_size, strict=True))  # fmt: skip
        emb_t = _rows(self.pos_emb_t, t)[None, :, None, None, :].repeat(batch_size, 1, h, w, 1)
        emb_h = _rows(self.pos_emb_h, h)[None, None, :, None, :].repeat(batch_size, t, 1, w, 1)
        emb_w = _rows(self.pos_emb_w, w)[None, None, None, :, :].repeat(batch_size, t, h, 1, 1)
        emb = (emb_t + emb_h + emb_w).flatten(1, 3)
        norm = torch.linalg.vector_norm(emb, dim=-1, keepdim=True, dtype=torch.float32)
        norm = torch.add(self.eps, norm, alpha=math.sqrt(1 / emb.shape[-1]))
        return (emb / norm).type_as(hidden_states)

    module.forward = types.MethodType(forward, module)


def _rows(table: torch.Tensor, count: int | torch.SymInt) -> torch.Tensor:
    """``table[:count]`` without a bound on ``count``."""
    return table.index_select(0, torch.arange(count, device=table.device))


def rotary_positions_by_arange(module: torch.nn.Module) -> None:
    # CosmosRotaryPosEmbed takes its positions as `arange(max(max_size))[:size]` per axis: the
    # slice's clamp bounds each size in the trace (as the learnable table's above). The positions
    # are `arange(size)` itself.
    def forward(
        self: torch.nn.Module, hidden_states: torch.Tensor, fps: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _, _, num_frames, height, width = hidden_states.shape
        t, h, w = (size // patch for size, patch in zip((num_frames, height, width),
                                                         self.patch_size, strict=True))  # fmt: skip
        device = hidden_states.device

        def freqs(dim: int, ntk_factor: float) -> torch.Tensor:
            steps = torch.arange(0, dim, 2, device=device, dtype=torch.float32)[: dim // 2] / dim
            return 1.0 / ((10000.0 * ntk_factor) ** steps)

        def seq(count: int | torch.SymInt) -> torch.Tensor:
            return torch.arange(count, device=device, dtype=torch.float32)

        emb_h = torch.outer(seq(h), freqs(self.dim_h, self.h_ntk_factor))
        emb_h = emb_h[None, :, None, :].repeat(t, 1, w, 1)
        emb_w = torch.outer(seq(w), freqs(self.dim_w, self.w_ntk_factor))
        emb_w = emb_w[None, None, :, :].repeat(t, h, 1, 1)
        frames = seq(t) if fps is None else seq(t) / fps * self.base_fps
        emb_t = torch.outer(frames, freqs(self.dim_t, self.t_ntk_factor))
        emb_t = emb_t[:, None, None, :].repeat(1, h, w, 1)
        angles = torch.cat([emb_t, emb_h, emb_w] * 2, dim=-1).flatten(0, 2).float()
        return torch.cos(angles), torch.sin(angles)

    module.forward = types.MethodType(forward, module)
