"""CogVideoX: the sincos position table placed behind the text slots by concatenation."""

from __future__ import annotations

import types

import torch


def joint_table_by_concat(module: torch.nn.Module) -> None:
    # CogVideoXPatchEmbed builds its table at the latents' size in forward, filling zeros through
    # `joint.data[:, text:].copy_(table)`: `.data` leaves the trace, and torch.export stops on
    # the fake tensor it leaves among the constants. Zeros for the text slots concatenated
    # before the table hold the same values. Its forward keeps the table built at init when the
    # latents have the config's sample size: a branch on the size (a guard the trace would keep)
    # between two equal tables, so the sample sizes read 0 and the table is always built.
    from diffusers.models.embeddings import get_3d_sincos_pos_embed

    def table(
        self: torch.nn.Module,
        sample_height: int,
        sample_width: int,
        sample_frames: int,
        device: torch.device | None = None,
    ) -> torch.Tensor:
        frames = (sample_frames - 1) // self.temporal_compression_ratio + 1
        positions = get_3d_sincos_pos_embed(
            self.embed_dim,
            (sample_width // self.patch_size, sample_height // self.patch_size),
            frames,
            self.spatial_interpolation_scale,
            self.temporal_interpolation_scale,
            device=device,
            output_type="pt",
        ).flatten(0, 1)
        text = positions.new_zeros(self.max_text_seq_length, self.embed_dim)
        return torch.cat([text, positions], dim=0)[None]

    module._get_positional_embeddings = types.MethodType(table, module)
    if module.use_positional_embeddings and not module.use_learned_positional_embeddings:
        module.sample_height = module.sample_width = module.sample_frames = 0
