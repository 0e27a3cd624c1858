"""OmniGen: the input images placed in the prompt for every row at once, and the rotary
scaling chosen by a tensor ``where``.

``OmniGenTransformer2DModel._get_multimodal_embeddings`` takes ``input_img_latents``, a Python
list of ``[1, channels, h, w]`` latents, and ``input_image_sizes``, a dict of each row's
``(start, end)`` token spans, and writes each image's patch tokens over its span of the
prompt's token embeddings in a Python loop: the loop fixes the batch and every span. Here the
latents are one stacked tensor ``[batch, channels, h, w]`` (one input image per row, all of one
size) and the spans an int64 tensor ``[batch, 2]``; each prompt slot takes the image token
``slot - start`` where it lies in the span (a gather), its own embedding elsewhere, so each
row's span may start anywhere; a span starting at the prompt's end places nothing (diffusers'
text-only call, an empty list).

``OmniGenSuScaledRotaryEmbedding`` picks its long or short frequency factors by a Python ``if``
on ``max(position_ids) + 1`` (a value the trace cannot branch on) and stores the frequencies on
the module; here ``torch.where`` picks them and they stay local.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch


def _placed(text: torch.Tensor, image: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """``text`` ``[B, T, D]`` with ``image`` ``[B, n, D]`` written over slots
    ``start[b] .. start[b] + n``."""
    n = image.shape[1]
    slots = torch.arange(text.shape[1], device=text.device)[None, :] - start[:, None]
    inside = (slots >= 0) & (slots < n)
    index = slots.clamp(min=0).clamp(max=n - 1)
    gathered = torch.gather(image, 1, index[..., None].expand(-1, -1, image.shape[-1]))
    return torch.where(inside[..., None], gathered.to(text.dtype), text)


def stacked_input_images(module: torch.nn.Module) -> None:
    def _get_multimodal_embeddings(
        self: Any,
        input_ids: torch.Tensor,
        input_img_latents: torch.Tensor,
        input_image_sizes: torch.Tensor,
    ) -> torch.Tensor | None:
        if input_ids is None:
            return None
        if isinstance(input_img_latents, (list, tuple)):
            raise ValueError("the batched OmniGen forward takes stacked input latents")
        text = self.embed_tokens(input_ids)
        image = self.patch_embedding(input_img_latents.to(self.dtype), is_input_image=True)
        return _placed(text, image, input_image_sizes[:, 0])

    module._get_multimodal_embeddings = types.MethodType(_get_multimodal_embeddings, module)
    module.takes_stacked_lists = True


def scaling_by_where(module: torch.nn.Module) -> None:
    def forward(self: Any, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> tuple:
        device = hidden_states.device
        long = torch.tensor(self.long_factor, dtype=torch.float32, device=device)
        short = torch.tensor(self.short_factor, dtype=torch.float32, device=device)
        seq_len = torch.max(position_ids) + 1
        ext_factors = torch.where(seq_len > self.original_max_position_embeddings, long, short)
        shape = torch.arange(0, self.dim, 2, dtype=torch.int64, device=device).float() / self.dim
        inv_freq = 1.0 / (ext_factors * self.base**shape)
        inv_freq = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv_freq @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)[0]  # row 0's positions, as diffusers takes them
        scale = self.max_position_embeddings / self.original_max_position_embeddings
        factor = 1.0
        if scale > 1.0:
            factor = math.sqrt(
                1 + math.log(scale) / math.log(self.original_max_position_embeddings)
            )
        return emb.cos() * factor, emb.sin() * factor

    module.forward = types.MethodType(forward, module)
