"""Chroma: the guidance embedding's zeros made from the batch size as a tensor shape."""

from __future__ import annotations

import types

import torch


def guidance_zeros_by_shape(module: torch.nn.Module) -> None:
    # ChromaCombinedTimestepTextProjEmbeddings embeds a guidance of 0 per row as
    # `torch.tensor([0] * batch_size)`: a Python list as long as the batch, so torch.export fixes
    # the batch to the traced one. `torch.zeros(batch)` holds the same int64 zeros.
    def forward(self: torch.nn.Module, timestep: torch.Tensor) -> torch.Tensor:
        mod_index_length = self.mod_proj.shape[0]
        batch_size = timestep.shape[0]
        timesteps_proj = self.time_proj(timestep).to(dtype=timestep.dtype)
        zeros = torch.zeros(batch_size, dtype=torch.int64, device=timestep.device)
        guidance_proj = self.guidance_proj(zeros).to(dtype=timestep.dtype)
        mod_proj = self.mod_proj.to(dtype=timesteps_proj.dtype, device=timesteps_proj.device)
        mod_proj = mod_proj.repeat(batch_size, 1, 1)
        timestep_guidance = torch.cat([timesteps_proj, guidance_proj], dim=1).unsqueeze(1)
        timestep_guidance = timestep_guidance.repeat(1, mod_index_length, 1)
        return torch.cat([timestep_guidance, mod_proj], dim=-1).to(timestep.dtype)

    module.forward = types.MethodType(forward, module)
