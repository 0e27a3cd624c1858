"""Wan Animate 2: one batched pass over stacked samples, its reference attention dense under a
boolean mask, and its rotary tables gathered at positions computed from the grid.

``WanAnimate2Transformer3DModel.forward`` takes ``hidden_states``, ``encoder_hidden_states`` and
``condition_latents`` as Python lists of per-sample tensors, loops over them to patch-embed,
reads the grid back with ``torch.tensor(u.shape)`` and ``.tolist()``, and builds complex128
rotary tables sliced by Python ints. Here each list is one stacked tensor (``list_args``), every
step is batched, and the rotary factors are rows of float32 (cos, sin) tables of ``ROWS``
positions per axis, computed once in float64 as ``rope_params`` computes them, gathered at each
token's (frame * stride + offset, row + offset, column + offset).

Its self-attention runs in two modes (``kv_cache_mode``, a Python string fixed per graph:
``mobius/diffusers/reference_cache.py``). "extract" attends densely over the reference tokens and
stores each layer's key and value before rotary (the cache the graph gives back). "cached" packs
the generation tokens and the cached reference tokens into 128-aligned buffers and hands flex
attention a ``BlockMask``: every generation token attends to every generation token and to the
reference tokens of the frame before its own (generation frame ``f`` to reference frame ``f -
1``; frame 0, the reference image's slot, to none). The buffers are sized for the full video
(``origin_len``, ``origin_area``); its pipeline passes exactly the segment's geometry (the
generation holds the reference's frames plus one, at the same area), so no zero row of the
buffers is ever attended and the padding is masked: dense SDPA over the concatenated keys under
that frame mask is the same attention. The geometry is taken from the inputs as the pipeline
derives it: the reference's frames are the cache's length over the generation's area. The mask
is generation x (generation + reference) booleans, and the scores as many floats per head:
memory grows with the square of the token count, where the compiled flex kernel skips the
masked blocks.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

ROWS = 1024  # positions per axis: the model's 512-row tables, shifted by offsets below 512


def _axis_table(dim: int) -> torch.Tensor:
    """``[ROWS, dim / 2, 2]`` (cos, sin) of position times ``rope_params``' frequencies,
    computed in float64 and kept as float32."""
    inverse = 1.0 / torch.pow(10000, torch.arange(0, dim, 2).to(torch.float64).div(dim))
    angles = torch.outer(torch.arange(ROWS, dtype=torch.float64), inverse)
    return torch.stack([angles.cos(), angles.sin()], dim=-1).float()


def _tables(head_dim: int) -> list[torch.Tensor]:
    """The frame, row and column tables, as ``_rope_freqs`` splits the head."""
    third = 2 * (head_dim // 6)
    return [_axis_table(head_dim - 2 * third), _axis_table(third), _axis_table(third)]


def _rotary(tables: list[torch.Tensor], length: Any, height: Any, width: Any, stride: int,
            offsets: tuple) -> torch.Tensor:  # fmt: skip
    """``[length, head_dim / 2, 2]`` rotary factors of ``length`` tokens laid out frame by
    frame on a ``height x width`` grid, frames ``stride`` apart, each axis shifted by its
    offset."""
    token = torch.arange(length, device=tables[0].device)
    area = height * width
    positions = (
        (token // area) * stride + offsets[0],
        (token % area) // width + offsets[1],
        token % width + offsets[2],
    )
    return torch.cat([t[p] for t, p in zip(tables, positions, strict=True)], dim=1)


def _rotate(x: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """``x`` ``[batch, tokens, heads, head_dim]`` times the complex factors of each token (pairs
    of features as (real, imaginary), ``torch.view_as_complex``'s layout)."""
    pairs = x.unflatten(-1, (-1, 2))
    real, imag = pairs[..., 0], pairs[..., 1]
    cos, sin = factors[:, None, :, 0], factors[:, None, :, 1]
    return torch.stack([real * cos - imag * sin, real * sin + imag * cos], dim=-1).flatten(-2)


def _frame_mask(generation: Any, reference: Any, area: Any, device: Any) -> torch.Tensor:
    """``[generation, generation + reference]`` bool: every generation token, and the reference
    tokens of the frame before the query's."""
    query_frame = torch.arange(generation, device=device) // area
    reference_frame = torch.arange(reference, device=device) // area + 1
    joint = query_frame[:, None] == reference_frame[None, :]
    every = torch.ones(generation, generation, dtype=torch.bool, device=device)
    return torch.cat([every, joint], dim=1)


class DenseReferenceAttnProcessor:
    """``WanAnimate2AttnProcessor`` with SDPA in place of flex attention: ``rotary_emb`` and
    ``reference_rotary_emb`` are the factors ``_rotary`` gives, ``attention_mask`` the frame
    mask (cached mode)."""

    def __call__(self, attn: Any, hidden_states: torch.Tensor, rotary_emb: torch.Tensor,
                 kv_cache: Any, kv_cache_mode: str, reference_rotary_emb: Any = None,
                 attention_mask: Any = None, **_unused: Any) -> torch.Tensor:  # fmt: skip
        query = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (attn.heads, -1))
        key = attn.norm_k(attn.to_k(hidden_states)).unflatten(2, (attn.heads, -1))
        value = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))
        if kv_cache_mode == "extract":
            kv_cache.store(key, value)
            query, key = _rotate(query, rotary_emb), _rotate(key, rotary_emb)
        else:
            key_ref, value_ref = kv_cache.get()
            query = _rotate(query, rotary_emb)
            key = torch.cat([_rotate(key, rotary_emb), _rotate(key_ref, reference_rotary_emb)], 1)
            value = torch.cat([value, value_ref], dim=1)
        out = F.scaled_dot_product_attention(
            query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
            attn_mask=attention_mask,
        ).transpose(1, 2)  # fmt: skip
        out = out.flatten(2, 3).type_as(query)
        return attn.to_out[1](attn.to_out[0](out))


def _offsets(config: Any, grid: tuple) -> tuple:
    """The reference's rotary offsets: a config's -1 is the reference grid's size on that axis."""
    chosen = (config.refer_offset_t, config.refer_offset_h, config.refer_offset_w)
    return tuple(size if offset < 0 else offset for offset, size in zip(chosen, grid, strict=True))


def batched_reference_transformer(module: torch.nn.Module) -> None:
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    def forward(self: Any, hidden_states: torch.Tensor, timestep: torch.Tensor,
                encoder_hidden_states: torch.Tensor, condition_latents: torch.Tensor,
                kv_cache: Any, kv_cache_mode: str, seq_len: Any = None,
                encoder_hidden_states_image: Any = None, offset_grid_sizes: Any = None,
                reference_grid_sizes: Any = None, origin_len: Any = None, origin_area: Any = None,
                is_uncondtion: bool = False, return_dict: bool = True) -> Any:  # fmt: skip
        if isinstance(hidden_states, (list, tuple)):
            raise ValueError("the batched Wan Animate 2 forward takes stacked samples, not lists")
        cfg = self.config
        tokens = self.patch_embedding(torch.cat([hidden_states, condition_latents], dim=1))
        batch, _, frames, height, width = tokens.shape
        tokens = tokens.flatten(2).transpose(1, 2)
        length, area = tokens.shape[1], height * width
        tables = [t.to(tokens.device) for t in self.rotary_tables]
        stride = cfg.refer_stride
        if kv_cache_mode == "extract":
            own = _rotary(tables, length, height, width, stride,
                          _offsets(cfg, (frames, height, width)))  # fmt: skip
            reference, mask = None, None
        else:
            reference_length = kv_cache.get(0).key.shape[1]
            grid = (reference_length // area, height, width)
            own = _rotary(tables, length, height, width, 1, (0, 0, 0))
            reference = _rotary(tables, reference_length, height, width, stride,
                                _offsets(cfg, grid))  # fmt: skip
            mask = _frame_mask(length, reference_length, area, tokens.device)
        timestep = timestep * 0 + 1 if kv_cache_mode == "extract" else timestep
        dtype = next(self.time_embedding.parameters()).dtype
        temb = self.time_embedding(self.timesteps_proj(timestep).to(dtype=dtype))
        timestep_proj = self.time_projection(temb).unflatten(1, (6, cfg.dim))
        text = F.pad(
            encoder_hidden_states, (0, 0, 0, cfg.text_len - encoder_hidden_states.shape[1])
        )
        text = self.text_embedding(text)
        image = self.img_emb(encoder_hidden_states_image) if cfg.use_img_emb else None
        for index, block in enumerate(self.blocks):
            if is_uncondtion and index == 9:
                continue
            tokens = block(tokens, temb=timestep_proj, encoder_hidden_states=text,
                           kv_cache=kv_cache.get(index), kv_cache_mode=kv_cache_mode,
                           rotary_emb=own, grid_sizes=None, encoder_hidden_states_image=image,
                           reference_rotary_emb=reference, attention_mask=mask)  # fmt: skip
        tokens = self.head(tokens, temb)
        pt, ph, pw = cfg.patch_size
        out = tokens.view(batch, frames, height, width, pt, ph, pw, cfg.out_dim)
        out = (
            torch.einsum("bfhwpqrc->bcfphqwr", out)
            .reshape(batch, cfg.out_dim, frames * pt, height * ph, width * pw)
            .float()
        )
        return Transformer2DModelOutput(sample=out) if return_dict else (out,)

    module.forward = types.MethodType(forward, module)
    module.rotary_tables = _tables(module.config.dim // module.config.num_heads)
    module.takes_stacked_lists = True
    for block in module.blocks:
        block.self_attn.processor = DenseReferenceAttnProcessor()
