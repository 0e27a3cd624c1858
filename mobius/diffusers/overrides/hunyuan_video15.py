"""HunyuanVideo 1.5: the prompts' valid tokens ordered first by one 0/1 matrix over the batch,
and the text-to-video branch on all-zero ``image_embeds`` computed in the graph; its VAE's
causal attention mask by frame comparisons.

diffusers' forward loops over the rows of the batch and concatenates, per row, the valid image,
ByT5 and MLLM tokens (boolean-mask selections: shapes from the masks' values), then the invalid
ones (the text ones zeroed); torch.export fixes the batch and the masks. Here the three streams
are concatenated once, the invalid text tokens zeroed, and every row reordered at once by
``valid_first`` (a stable partition: the same order, each value moved unchanged); the new mask
is each row's valid count as a prefix. ``torch.all(image_embeds == 0)`` (the text-to-video
pipeline passes zeros, image-to-video the image's SigLIP features) chose in Python whether the
image tokens are zeroed and masked out; ``image_embeds`` is an input, so the choice is a
``where`` on that condition in the graph.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from mobius.diffusers.overrides.valid_first import valid_first


def _joint_prompt(
    self: Any,
    encoder_hidden_states: torch.Tensor,
    encoder_attention_mask: torch.Tensor,
    encoder_hidden_states_2: torch.Tensor,
    encoder_attention_mask_2: torch.Tensor,
    image_embeds: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The image, ByT5 and MLLM tokens of each row, valid ones first, and their mask."""
    batch_size = encoder_hidden_states.size(0)
    image = self.image_embedder(image_embeds)
    is_t2v = torch.all(image_embeds == 0)
    image = torch.where(is_t2v, image * 0.0, image)
    image_mask = (~is_t2v).expand(batch_size, image.size(1))

    def with_type(states: torch.Tensor, kind: int) -> torch.Tensor:
        kinds = torch.full_like(states[:, :, 0], kind, dtype=torch.long)
        return states + self.cond_type_embed(kinds)

    mask, mask_2 = encoder_attention_mask.bool(), encoder_attention_mask_2.bool()
    text = torch.where(mask[..., None], with_type(encoder_hidden_states, 0), 0.0)
    text_2 = torch.where(mask_2[..., None], with_type(encoder_hidden_states_2, 1), 0.0)
    tokens = torch.cat([with_type(image, 2), text_2, text], dim=1)
    valid = torch.cat([image_mask, mask_2, mask], dim=1)
    moves = valid_first(valid).to(tokens.dtype)
    tokens = torch.einsum("bji,bid->bjd", moves, tokens)
    slots = torch.arange(valid.size(1), device=valid.device)
    return tokens, slots[None, :] < valid.sum(1, keepdim=True)


def valid_tokens_by_matrix(module: torch.nn.Module) -> None:
    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        timestep_r: torch.Tensor | None = None,
        encoder_hidden_states_2: torch.Tensor | None = None,
        encoder_attention_mask_2: torch.Tensor | None = None,
        image_embeds: torch.Tensor | None = None,
        attention_kwargs: dict[str, Any] | None = None,
        return_dict: bool = True,
    ) -> Any:
        from diffusers.models.modeling_outputs import Transformer2DModelOutput

        batch_size, _, num_frames, height, width = hidden_states.shape
        p_t, p = self.config.patch_size_t, self.config.patch_size
        image_rotary_emb = self.rope(hidden_states)
        temb = self.time_embed(timestep, timestep_r=timestep_r)
        hidden_states = self.x_embedder(hidden_states)
        encoder_hidden_states = self.context_embedder(
            encoder_hidden_states, timestep, encoder_attention_mask
        )
        encoder_hidden_states_2 = self.context_embedder_2(encoder_hidden_states_2)
        encoder_hidden_states, encoder_attention_mask = _joint_prompt(
            self,
            encoder_hidden_states,
            encoder_attention_mask,
            encoder_hidden_states_2,
            encoder_attention_mask_2,
            image_embeds,
        )
        for block in self.transformer_blocks:
            hidden_states, encoder_hidden_states = block(
                hidden_states, encoder_hidden_states, temb, encoder_attention_mask, image_rotary_emb
            )
        hidden_states = self.proj_out(self.norm_out(hidden_states, temb))
        hidden_states = hidden_states.reshape(
            batch_size, num_frames // p_t, height // p, width // p, -1, p_t, p, p
        )
        hidden_states = hidden_states.permute(0, 4, 1, 5, 2, 6, 3, 7)
        hidden_states = hidden_states.flatten(6, 7).flatten(4, 5).flatten(2, 3)
        return Transformer2DModelOutput(sample=hidden_states) if return_dict else (hidden_states,)

    module.forward = types.MethodType(forward, module)


def causal_mask_by_frames(module: torch.nn.Module) -> None:
    # HunyuanVideo15AttnBlock fills its causal mask, [tokens, tokens] with tokens = frames x
    # height x width, by a Python loop over every token (unrolled at the traced sizes), and
    # expands it to [batch, tokens, tokens] against queries of [batch, 1, tokens, channels],
    # which broadcasts to [batch, batch, ...] and fails past batch 1 in PyTorch itself. Token i
    # sees token j when j's frame is not after i's: one comparison of frame indices, the same
    # mask for every row, so a row's output is what the model gives that row alone.
    def prepare_causal_attention_mask(
        n_frame: Any, n_hw: Any, dtype: Any, device: Any, batch_size: Any = None
    ) -> torch.Tensor:
        frame = torch.arange(n_frame * n_hw, device=device) // n_hw
        return frame[None, :] <= frame[:, None]  # [tokens, tokens], True = attended

    module.prepare_causal_attention_mask = prepare_causal_attention_mask
