"""Lumina 2: the joint caption-image sequence built for every row at once, by gathers.

``Lumina2RotaryPosEmbed`` reads each row's caption length with ``attention_mask.sum(1).tolist()``
and the model loops over the rows in Python to place the row's first ``L`` caption tokens, then
its image tokens, in a sequence as long as the longest row (``max`` of the Python lengths), and
to cut the image tokens back out: ``tolist`` is data-dependent (torch.export cannot trace it) and
the loops fix the batch. Here the lengths stay a tensor, the joint sequence is ``text + image``
tokens long (the longest any row can be) and every row is placed, positioned and cut out by
gathers on its length. The positions past a row's end are masked keys, as diffusers masks them
when the rows differ; when they do not, diffusers drops the mask and the tail, and masked keys
weigh 0, so the valid outputs are the same. As in diffusers, a row's caption is its first ``L``
tokens (``L`` = its mask's count) and caption rotary factors are zero past them, so a mask with
holes gives diffusers' result too (checked in PyTorch: equal to the last bit).
"""

from __future__ import annotations

import types
from typing import Any

import torch


def _joint_layout(
    caption_lengths: torch.Tensor, text: int, image: int, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row ``b`` and joint slot ``j`` (``text + image`` slots): the source token in
    ``cat([caption, image], 1)``, whether the slot holds a token, and its three positions
    (caption index or the caption length; patch row; patch column), as diffusers numbers them."""
    slots = torch.arange(text + image, device=caption_lengths.device)[None, :]  # [1, J]
    length = caption_lengths[:, None]  # [B, 1]
    in_caption = slots < length
    patch = slots - length  # the image token of the slot
    in_image = (patch >= 0) & (patch < image)
    source = torch.where(in_caption, slots, torch.where(in_image, patch + text, 0))
    patch = torch.where(in_image, patch, 0)
    positions = torch.stack(
        [
            torch.where(in_caption, slots, torch.where(in_image, length, 0)),
            torch.div(patch, width, rounding_mode="floor"),
            patch % width,
        ],
        dim=-1,
    )
    return source, in_caption | in_image, positions


def _rows(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[b, index[b, j]]`` for ``values`` [B, N, ...] and ``index`` [B, J]."""
    shape = index.shape + values.shape[2:]
    flat = index.reshape(*index.shape, *([1] * (values.dim() - 2))).expand(shape)
    return torch.gather(values, 1, flat)


def _rotary(rope: Any, positions: torch.Tensor) -> torch.Tensor:
    """The rotary factors of ``positions`` [B, J, 3] as (real, imaginary) pairs
    [B, J, sum(d) / 2, 2]: each axis's table row, concatenated
    (``Lumina2RotaryPosEmbed._get_freqs_cis`` by ``index_select``)."""
    tables = [
        table.to(positions.device).index_select(0, positions[..., i].flatten())
        for i, table in enumerate(rope.freqs_pairs)
    ]
    flat = torch.cat(tables, dim=1)  # [B * J, sum(d) / 2, 2]
    return flat.reshape(*positions.shape[:2], *flat.shape[1:])


def _complex(pairs: torch.Tensor) -> torch.Tensor:
    return torch.view_as_complex(pairs.contiguous())


def joint_sequence_by_gathers(module: torch.nn.Module) -> None:
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        attention_kwargs: dict | None = None,
        return_dict: bool = True,
    ) -> Any:
        batch_size, channels, height, width = hidden_states.shape
        p = self.config.patch_size
        rows, cols = height // p, width // p
        image = rows * cols
        text = encoder_hidden_states.shape[1]
        temb, encoder_hidden_states = self.time_caption_embed(
            hidden_states, timestep, encoder_hidden_states
        )
        lengths = encoder_attention_mask.sum(dim=1)
        source, valid, positions = _joint_layout(lengths, text, image, cols)
        rotary = _rotary(self.rope_embedder, positions)  # [B, text + image, d / 2, 2]
        in_caption = torch.arange(text, device=lengths.device)[None, :] < lengths[:, None]
        in_caption = in_caption[:, :, None, None].to(rotary.dtype)  # zeros past the caption
        caption_rotary = _complex(rotary[:, :text] * in_caption)
        image_slots = lengths[:, None] + torch.arange(image, device=lengths.device)[None, :]
        image_rotary = _complex(_rows(rotary, image_slots))
        rotary = _complex(rotary)

        hidden_states = (
            hidden_states.view(batch_size, channels, rows, p, cols, p)
            .permute(0, 2, 4, 3, 5, 1)
            .flatten(3)
            .flatten(1, 2)
        )
        hidden_states = self.x_embedder(hidden_states)
        for layer in self.context_refiner:
            encoder_hidden_states = layer(
                encoder_hidden_states, encoder_attention_mask, caption_rotary
            )
        for layer in self.noise_refiner:
            hidden_states = layer(hidden_states, None, image_rotary, temb)

        tokens = torch.cat([encoder_hidden_states, hidden_states], dim=1)
        hidden_states = _rows(tokens, source) * valid[..., None].to(tokens.dtype)
        for layer in self.layers:
            hidden_states = layer(hidden_states, valid, rotary, temb)
        hidden_states = self.norm_out(hidden_states, temb)

        image_tokens = _rows(hidden_states, image_slots)
        output = (
            image_tokens.view(batch_size, rows, cols, p, p, self.out_channels)
            .permute(0, 5, 1, 3, 2, 4)
            .flatten(4, 5)
            .flatten(2, 3)
        )
        if not return_dict:
            return (output,)
        return Transformer2DModelOutput(sample=output)

    module.forward = types.MethodType(forward, module)
    # the complex128 tables as float64 pairs: a traced constant is an initializer, and ONNX
    # initializers have no complex type (the values computed from them are carried as pairs)
    module.rope_embedder.freqs_pairs = [
        torch.view_as_real(t) for t in module.rope_embedder.freqs_cis
    ]
