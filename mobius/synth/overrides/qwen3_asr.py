"""Qwen3-ASR's audio tower: its attention windows as segment ids, not ``cu_seqlens``. The same
tower is Qwen3-Omni's (``qwen_omni.py``), which reuses ``packed_windows``."""

from __future__ import annotations

import sys
from typing import Any

import torch


def windows_by_segment(module: torch.nn.Module) -> None:
    # Qwen3ASREncoder packs every clip's valid post-convolution frames into one sequence and
    # attends within windows of window = (longest chunk's frames) * (n_window_infer // chunk):
    # get_audio_cu_seqlens lays the windows out with .item() and a Python loop over the clips,
    # and the attention splits by lengths.tolist(), all from the mask's values. Here each packed
    # frame gets a segment id, (clip, rank within the clip // window), computed with tensor ops
    # from the same mask, and the attention attends where the ids are equal: the same windows.
    def forward(input_features: torch.Tensor, input_features_mask: torch.Tensor, **kwargs: Any):
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        hidden = packed_windows(module, input_features, input_features_mask)
        return BaseModelOutputWithPooling(last_hidden_state=module.ln_post(hidden))

    module.forward = forward
    masked_attention_layers(module)


def masked_attention_layers(module: torch.nn.Module) -> None:
    """Every layer's attention of the tower by segment ids (``_masked_attention``)."""
    for layer in module.layers:
        _masked_attention(layer.self_attn)


def after_convolutions(lengths: torch.Tensor) -> torch.Tensor:
    """A chunk's frames after the three (k=3, s=2, p=1) convolutions; zero stays zero."""
    for _ in range(3):
        lengths = torch.where(lengths > 0, (lengths - 1) // 2 + 1, torch.zeros_like(lengths))
    return lengths


def packed_windows(
    module: torch.nn.Module, input_features: torch.Tensor, input_features_mask: torch.Tensor
) -> torch.Tensor:
    """The tower's layers on every clip's valid post-convolution frames, packed in clip order
    (``[frames, width]``, before ``ln_post``), each attending within its window (the layers'
    attention must take segment ids: ``masked_attention_layers``). ``input_features`` is
    ``[batch, mel, frames]``, frames a multiple of ``2 * n_window``, cut into chunks of that."""
    family = sys.modules[type(module).__module__]
    batch, mel, length = input_features.shape
    chunk = module.n_window * 2
    chunks = length // chunk
    chunk_lengths = input_features_mask.view(batch, chunks, chunk).sum(-1).reshape(-1).long()
    grid = (
        input_features.view(batch, mel, chunks, chunk)
        .permute(0, 2, 1, 3)
        .reshape(batch * chunks, 1, mel, chunk)
    )
    out = torch.nn.functional.gelu(module.conv2d1(grid))
    out = torch.nn.functional.gelu(module.conv2d2(out))
    out = torch.nn.functional.gelu(module.conv2d3(out))
    total, channels, freq, steps = out.size()
    out = module.conv_out(out.permute(0, 3, 1, 2).reshape(total, steps, channels * freq))
    out = out + module.positional_embedding.positional_embedding[:steps].to(out.dtype)
    valid = torch.arange(steps, device=out.device) < after_convolutions(chunk_lengths)[:, None]
    # segment of every grid frame: its clip, and its rank among the clip's valid frames
    after = family._get_feat_extract_output_lengths(chunk_lengths, module.n_window)
    window = after.max() * (module.n_window_infer // chunk)
    per_clip = valid.reshape(batch, chunks * steps).long()
    rank = per_clip.cumsum(-1) - 1
    clip = torch.arange(batch, device=out.device)[:, None]
    segment = clip * (chunks * steps + 1) + torch.div(rank, window, rounding_mode="floor")
    # one boolean selection for the frames and their ids (exact in float: ids < 2**24), so
    # both have the same (data-dependent) length
    rows = torch.cat([out.reshape(-1, out.shape[-1]), segment.reshape(-1, 1).to(out.dtype)], -1)
    packed = rows[valid.flatten()]
    hidden, segment = packed[:, :-1], packed[:, -1]
    for layer in module.layers:
        hidden = layer(hidden, segment, max_seqlen=None)[0]
    return hidden


def _masked_attention(attn: torch.nn.Module) -> None:
    """The layer's attention over the packed frames where the segment ids are equal (given in
    place of ``cu_seqlens``), one call for every window."""

    def forward(
        hidden_states: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: Any = None, **_: Any
    ) -> torch.Tensor:
        hidden, segment = hidden_states, cu_seqlens
        length = hidden.shape[0]
        shape = (length, attn.num_heads, -1)
        q, k, v = (
            proj(hidden).reshape(shape).transpose(0, 1)[None]
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj)
        )
        same = (segment[:, None] == segment[None, :])[None, None]
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=same, scale=attn.scaling
        )
        return attn.out_proj(out[0].transpose(0, 1).reshape(length, -1))

    attn.forward = forward
