"""SANA-WM: its feed-forward's convolutions in one call over all frames; its complex rotary
table made in the graph from the model's recipe."""

from __future__ import annotations

import types

import torch


def unchunked_feed_forward(module: torch.nn.Module) -> None:
    # GLUMBConvTemp.forward runs its spatial convolutions over batch x frames rows in chunks of
    # 2^30 / (channels x height x width) rows (`range(0, rows, rows_per_call)`), only to keep each
    # CUDA launch under 32-bit indexing; the comparison with the symbolic row count fixes the
    # batch and the frames. Each row is convolved alone, so one call over all of them is the same
    # computation.
    def forward(self: torch.nn.Module, hidden_states: torch.Tensor, HW: tuple) -> torch.Tensor:  # noqa: N803
        batch_size, seq_len, channels = hidden_states.shape
        num_frames, height, width = HW
        hidden_states = hidden_states.reshape(batch_size * num_frames, height, width, channels)
        hidden_states = self.depth_conv(self.inverted_conv(hidden_states.permute(0, 3, 1, 2)))
        value, gate = torch.chunk(hidden_states, 2, dim=1)
        hidden_states = self.point_conv(value * self.glu_act(gate))
        hidden_states = hidden_states.view(batch_size, num_frames, channels, height * width)
        hidden_states = hidden_states.permute(0, 2, 1, 3)
        hidden_states = hidden_states + self.t_conv(hidden_states)
        return hidden_states.permute(0, 2, 3, 1).reshape(batch_size, seq_len, channels)

    module.forward = types.MethodType(forward, module)


def rotary_by_recipe(module: torch.nn.Module, theta: float = 10000.0) -> None:
    # SanaWMRotaryPosEmbed holds a complex64 table of max_seq_len positions per axis
    # (get_1d_rotary_pos_embed: polar(1, outer(position, inverse frequency))) and slices it to the
    # latent grid: a complex constant cannot be an ONNX initializer. The same table is made in the
    # graph, polar(1, outer(arange(n), inverse frequency)), from the real inverse frequencies
    # (checked equal to the model's table here, at install).
    head = module.attention_head_dim
    axis_dim = 2 * (head // 6)  # height's and width's; frames take the rest (fhw_dim unset)
    dims = (head - 2 * axis_dim, axis_dim, axis_dim)
    inverse = torch.cat([
        1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)) for d in dims
    ])  # fmt: skip
    positions = torch.arange(module.max_seq_len, dtype=torch.float32)
    table = torch.outer(positions, inverse)
    if not torch.equal(torch.polar(torch.ones_like(table), table), module.freqs.cpu()):
        return  # another recipe than this one: leave the model's own
    halves = [head // 2 - 2 * (head // 6), head // 6, head // 6]

    def forward(self: torch.nn.Module, fhw: tuple, device: torch.device | None = None):
        sizes = tuple(fhw)
        grid = []
        for axis, (n, inv) in enumerate(zip(sizes, inverse.split(halves), strict=True)):
            angles = torch.outer(
                torch.arange(n, dtype=torch.float32, device=device), inv.to(device)
            )
            shape = [1, 1, 1, -1]
            shape[axis] = n
            grid.append(angles.view(shape).expand(*sizes, -1))
        angles = torch.cat(grid, dim=-1).reshape(1, 1, sizes[0] * sizes[1] * sizes[2], -1)
        return torch.polar(torch.ones_like(angles), angles)

    module.forward = types.MethodType(forward, module)
