"""HunyuanVideo Framepack: the prompt's padding as one key mask over the batch, at every batch.

diffusers' forward cuts the prompt to its unpadded length at batch 1 (``[:, :length[0]]``, a
shape from the mask's values) and at other batches sets each row's attention mask in a Python
loop over the batch (torch.export takes batch 1 for a constant and cannot loop over a symbolic
batch). Here every batch takes the mask path: row ``b`` attends to its latent tokens, its image
tokens and its first ``length[b]`` prompt tokens (``arange < length``, the loop's mask). The
pipelines pad prompts on the right, so a masked key weighs 0 and attention over the full padded
length equals attention over the cut prompt; the output reads only the latent tokens.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def prompt_mask_at_every_batch(module: torch.nn.Module) -> None:
    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        pooled_projections: torch.Tensor,
        image_embeds: torch.Tensor,
        indices_latents: torch.Tensor,
        guidance: torch.Tensor | None = None,
        latents_clean: torch.Tensor | None = None,
        indices_latents_clean: torch.Tensor | None = None,
        latents_history_2x: torch.Tensor | None = None,
        indices_latents_history_2x: torch.Tensor | None = None,
        latents_history_4x: torch.Tensor | None = None,
        indices_latents_history_4x: torch.Tensor | None = None,
        attention_kwargs: dict[str, Any] | None = None,
        return_dict: bool = True,
    ) -> Any:
        from diffusers.models.modeling_outputs import Transformer2DModelOutput

        batch_size, _, num_frames, height, width = hidden_states.shape
        p, p_t = self.config.patch_size, self.config.patch_size_t
        frames, rows, cols = num_frames // p_t, height // p, width // p
        device = hidden_states.device

        def rope(indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.rope(frame_indices=indices, height=height, width=width, device=device)

        hidden_states = self.x_embedder(hidden_states)
        latents_clean, latents_history_2x, latents_history_4x = self.clean_x_embedder(
            latents_clean, latents_history_2x, latents_history_4x
        )
        hidden_states, image_rotary_emb = self._pack_history_states(
            hidden_states,
            latents_clean,
            latents_history_2x,
            latents_history_4x,
            rope(indices_latents),
            rope(indices_latents_clean),
            rope(indices_latents_history_2x),
            rope(indices_latents_history_4x),
            rows,
            cols,
        )
        temb, _ = self.time_text_embed(timestep, pooled_projections, guidance)
        encoder_hidden_states = self.context_embedder(
            encoder_hidden_states, timestep, encoder_attention_mask
        )
        image = self.image_projection(image_embeds)
        encoder_hidden_states = torch.cat([image, encoder_hidden_states], dim=1)
        # the model's loop: row b's first latent + image + length[b] tokens are attended
        length = encoder_attention_mask.sum(dim=1, dtype=torch.int) + image.size(1)
        slots = torch.arange(encoder_hidden_states.size(1), device=device)
        prompt_keys = slots[None, :] < length[:, None]
        latent_keys = torch.ones_like(prompt_keys[:, :1]).expand(-1, hidden_states.size(1))
        attention_mask = torch.cat([latent_keys, prompt_keys], dim=1)[:, None, None, :]
        for block in [*self.transformer_blocks, *self.single_transformer_blocks]:
            hidden_states, encoder_hidden_states = block(
                hidden_states, encoder_hidden_states, temb, attention_mask, image_rotary_emb
            )
        hidden_states = hidden_states[:, -frames * rows * cols :]
        hidden_states = self.proj_out(self.norm_out(hidden_states, temb))
        hidden_states = hidden_states.reshape(batch_size, frames, rows, cols, -1, p_t, p, p)
        hidden_states = hidden_states.permute(0, 4, 1, 5, 2, 6, 3, 7)
        hidden_states = hidden_states.flatten(6, 7).flatten(4, 5).flatten(2, 3)
        return Transformer2DModelOutput(sample=hidden_states) if return_dict else (hidden_states,)

    module.forward = types.MethodType(forward, module)
