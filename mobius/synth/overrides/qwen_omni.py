"""Qwen-Omni thinkers' audio features: every clip's chunks on a fixed grid from the mask, not
lists of chunk lengths."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from mobius.synth.overrides.qwen3_asr import masked_attention_layers, packed_windows


def _output(hidden: torch.Tensor) -> Any:
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=hidden)


def _mask_of(mask: torch.Tensor | None, features: torch.Tensor) -> torch.Tensor:
    """The processor's frame mask (every frame real where none is given)."""
    if mask is None:
        return torch.ones(
            features.shape[0], features.shape[-1], dtype=torch.long, device=features.device
        )
    return mask.long()


def qwen2_5_chunks_on_grid(module: torch.nn.Module) -> None:
    # Qwen2_5OmniThinkerModel.get_audio_features keeps the real frames of every clip with a
    # boolean mask (one [mel, total] row of frames), then the tower cuts each clip into chunks of
    # 2 * n_window frames by split(chunk_lengths.tolist()), attends within each chunk by
    # cu_seqlens.tolist(), and averages each clip's frames in pairs at indices built with
    # repeat_interleave; all of it fixes the clip lengths in a trace. Here the padded
    # [batch, mel, frames] batch (frames a multiple of the chunk) is the chunk grid itself, its
    # padding zeroed as HF's pad_sequence does, and the layers run on the grid, each chunk
    # attending to its valid frames (a padding frame to itself too, so no row is empty). Every
    # chunk but a clip's last is full, so a clip's valid frames are the first ones of its row of
    # chunks: the pairs are averaged on that row, and the rows of each clip's real pairs kept.
    tower = module.audio_tower
    chunk = 2 * tower.n_window

    def get_audio_features(
        input_features: torch.Tensor,
        feature_attention_mask: torch.Tensor | None = None,
        audio_feature_lengths: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        mask = _mask_of(feature_attention_mask, input_features)
        batch, mel, frames = input_features.shape
        chunks = frames // chunk
        grid = (input_features * mask[:, None, :].to(input_features.dtype)).view(
            batch, mel, chunks, chunk
        )
        grid = grid.permute(0, 2, 1, 3).reshape(batch * chunks, mel, chunk)
        lengths = mask.view(batch, chunks, chunk).sum(-1).reshape(-1, 1)
        inside = (torch.arange(chunk, device=grid.device)[None, :] < lengths)[:, None, :]
        out = F.gelu(tower.conv1(grid.to(tower.conv1.weight.dtype))) * inside
        out = F.gelu(tower.conv2(out)).transpose(1, 2)
        steps, width = out.shape[1], out.shape[2]
        out = out + tower.positional_embedding.positional_embedding[:steps].to(out.dtype)
        valid = torch.arange(steps, device=out.device)[None, :] < (lengths - 1) // 2 + 1
        itself = torch.eye(steps, dtype=torch.bool, device=out.device)
        keys = valid[:, None, None, :] | itself[None, None]
        for layer in tower.layers:
            out = layer(out, keys)[0]
        row = out.reshape(batch, chunks * steps, width)
        if (chunks * steps) % 2:  # a last frame with no partner is never pooled
            row = F.pad(row, (0, 0, 0, 1))
        pairs = row.view(batch, -1, 2, width)
        pooled = (pairs[:, :, 0] + pairs[:, :, 1]) / 2
        real = valid.reshape(batch, chunks * steps).sum(-1, keepdim=True)
        kept = torch.arange(pooled.shape[1], device=out.device)[None, :] < real // 2
        return _output(tower.proj(tower.ln_post(pooled[kept])))

    module.get_audio_features = get_audio_features
    for layer in tower.layers:
        _chunk_attention(layer.self_attn)


def _chunk_attention(attn: torch.nn.Module) -> None:
    """The layer's attention over the grid of chunks ``[chunks, steps, width]``, each chunk's
    frames attending where the boolean mask (given in place of ``cu_seqlens``) allows."""

    def forward(
        hidden_states: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: Any = None, **_: Any
    ) -> torch.Tensor:
        chunks, steps = hidden_states.shape[:2]
        q, k, v = (
            proj(hidden_states).view(chunks, steps, attn.num_heads, -1).transpose(1, 2)
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj)
        )
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=cu_seqlens, scale=attn.scaling)
        return attn.out_proj(out.transpose(1, 2).reshape(chunks, steps, -1))

    attn.forward = forward


def qwen3_windows_on_grid(module: torch.nn.Module) -> None:
    # Qwen3OmniMoeThinkerModel.get_audio_features keeps the real frames with a boolean mask and
    # its tower cuts them into chunks by lists of lengths: Qwen3-ASR's tower behind a different
    # entry. Here the padded batch, its padding zeroed (HF pads the chunks with zeros), goes
    # through Qwen3-ASR's grid of chunks and windows by segment id (``qwen3_asr.packed_windows``),
    # then the tower's own output projection.
    tower = module.audio_tower

    def get_audio_features(
        input_features: torch.Tensor,
        feature_attention_mask: torch.Tensor | None = None,
        audio_feature_lengths: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        mask = _mask_of(feature_attention_mask, input_features)
        zeroed = input_features * mask[:, None, :].to(input_features.dtype)
        hidden = tower.ln_post(packed_windows(tower, zeroed, mask))
        return _output(tower.proj2(tower.act(tower.proj1(hidden))))

    module.get_audio_features = get_audio_features
    masked_attention_layers(tower)
