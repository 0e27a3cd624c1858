"""Kandinsky 6: the SR VAE in one pass over the whole video instead of segments of 16 frames,
and the transformer's rotary grid read from the positions' sizes, not int() of them.

``Kandinsky6SRVAE.encode``/``decode`` cut the video into segments of 16 (pixel) frames in a
Python loop whose segment lengths are computed from the frame count, and its causal
convolutions carry their padding from one segment to the next through a cache so that the
result is that of one pass (diffusers says so, and the segments only bound memory): the trace
held only for 2-8 latent frames. Here each graph is one call over every frame with a fresh cache,
each causal convolution one convolution over the video behind its repeated first frame (the same
windows as the first segment's two convolutions), and ``Kandinsky6SRSafeConv3d`` a plain
``Conv3d`` (it chunks inputs of over 2e9 elements, again only for memory).
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F


def single_pass(module: torch.nn.Module) -> None:
    from diffusers.models.autoencoders.vae import DecoderOutput, DiagonalGaussianDistribution
    from diffusers.models.modeling_outputs import AutoencoderKLOutput

    def encode(self: Any, x: torch.Tensor, return_dict: bool = True) -> Any:
        posterior = DiagonalGaussianDistribution(self.encoder(x, self.encoder.make_cache()))
        return AutoencoderKLOutput(latent_dist=posterior) if return_dict else (posterior,)

    def decode(self: Any, z: torch.Tensor, return_dict: bool = True) -> Any:
        decoded = self.decoder(z, self.decoder.make_cache())
        return DecoderOutput(sample=decoded) if return_dict else (decoded,)

    module.encode = types.MethodType(encode, module)
    module.decode = types.MethodType(decode, module)


def causal_conv_in_one(module: torch.nn.Module) -> None:
    # Only the first segment's computation (cache empty) is ever asked for after `single_pass`;
    # it leaves the cache empty, as no segment follows.
    def forward(self: Any, hidden_states: torch.Tensor, cache: dict) -> torch.Tensor:
        if cache["padding"] is not None:
            raise NotImplementedError("Kandinsky6SRCausalConv3d: one pass only")
        pads = (self.width_pad, self.width_pad, self.height_pad, self.height_pad)
        hidden_states = F.pad(hidden_states, pads)
        padding = hidden_states[:, :, :1].expand(-1, -1, self.time_pad, -1, -1)
        return self.conv(torch.cat([padding, hidden_states], dim=2))

    module.forward = types.MethodType(forward, module)


def plain_conv(module: torch.nn.Module) -> None:
    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.Conv3d.forward(self, x)

    module.forward = types.MethodType(forward, module)


def rotary_grid_by_shape(module: torch.nn.Module) -> None:
    # Kandinsky6RoPE3D reads the grid as `int(axis_pos.shape[0])` per axis: int() of a traced
    # size fixes frames, height and width to the traced ones. The sizes themselves give the same
    # table at every size (positions past max_pos fail as in PyTorch: an index past the table).
    def forward(
        self: Any, pos: tuple[torch.Tensor, ...], scale_factor: tuple[float, ...] = (1.0, 1.0, 1.0)
    ) -> torch.Tensor:
        grid = tuple(axis_pos.shape[0] for axis_pos in pos)  # frames, height, width
        angles = [
            (getattr(self, f"angles_{i}")[pos[i]] / scale_factor[i]).view(
                *(grid[i] if j == i else 1 for j in range(3)), -1
            ).expand(*grid, -1)
            for i in range(3)
        ]  # fmt: skip
        angles = torch.cat(angles, dim=-1)
        cos, sin = torch.cos(angles), torch.sin(angles)
        rope = torch.stack([cos, -sin, sin, cos], dim=-1)
        return rope.view(*rope.shape[:-1], 2, 2).unsqueeze(-4)

    module.forward = types.MethodType(forward, module)
