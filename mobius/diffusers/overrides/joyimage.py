"""JoyImage: rotary positions by ``arange`` of the latents' sizes, and the text's start as a size."""

from __future__ import annotations

import types

import torch


def symbolic_rotary_positions(module: torch.nn.Module) -> None:
    # JoyImageEditTransformer3DModel.get_rotary_pos_embed takes each axis's positions as
    # `linspace(0, s, s + 1)[:s]` (0, 1, ..., s - 1, exactly: the step is 1.0) and starts the text
    # after `grid.max().item() + 1`, which is the largest of the three sizes: `.item()` and
    # linspace's step count fix the sizes to the traced ones. `arange(s)` and `sym_max` of the
    # sizes give the same positions.
    def get_rotary_pos_embed(
        self: torch.nn.Module, vis_rope_size: list, txt_rope_size: int | None = None
    ) -> tuple:
        sizes = [1] * (3 - len(vis_rope_size)) + list(vis_rope_size)
        head_dim = self.hidden_size // self.num_attention_heads
        dims = self.rope_dim_list or [head_dim // 3] * 3
        if sum(dims) != head_dim:
            raise ValueError("sum(rope_dim_list) should equal head_dim")
        axes = [torch.arange(s, dtype=torch.float32) for s in sizes]
        grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=0)
        vis = _cos_sin(self.theta, dims, [grid[i].reshape(-1) for i in range(3)])
        if txt_rope_size is None:
            return vis, None
        start = torch.sym_max(torch.sym_max(sizes[0], sizes[1]), sizes[2])
        text = torch.arange(txt_rope_size, dtype=torch.float32) + start
        return vis, _cos_sin(self.theta, dims, [text] * 3)

    module.get_rotary_pos_embed = types.MethodType(get_rotary_pos_embed, module)


def _cos_sin(theta: float, dims: list[int], positions: list[torch.Tensor]) -> tuple:
    """Per-axis 1-D rotary tables, each value repeated twice, concatenated over the axes."""
    cos, sin = [], []
    for dim, pos in zip(dims, positions, strict=True):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32)[: dim // 2] / dim))
        angles = torch.outer(pos.float(), freqs)
        cos.append(angles.cos().repeat_interleave(2, dim=1))
        sin.append(angles.sin().repeat_interleave(2, dim=1))
    return torch.cat(cos, dim=1), torch.cat(sin, dim=1)
