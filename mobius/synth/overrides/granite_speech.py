"""Granite Speech: the Conformer's block attention and the Q-Former's windows without branches
on the frame count."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def blocks_without_branch(module: torch.nn.Module) -> None:
    # GraniteSpeechConformerAttention pads the frames to whole blocks of context_size and masks
    # the last block's padding behind `if remainder > 0` on the frame count, which fixes the
    # count in the trace. Here the pad is always (-frames) % context_size (zero rows when none is
    # needed), and the last block's mask is built from the remainder as a tensor and applied only
    # where the remainder is not zero: the same attention for every count.
    def forward(hidden_states: torch.Tensor, attention_dists: torch.Tensor) -> torch.Tensor:
        context = module.context_size
        hidden_states = module.pre_norm(hidden_states)
        bsz, frames, _ = hidden_states.shape
        remainder = frames % context
        padded = F.pad(hidden_states, (0, 0, 0, (context - remainder) % context))
        blocks = padded.shape[1] // context
        q = module.to_q(padded)
        k, v = module.to_kv(padded).chunk(2, dim=-1)
        q, k, v = (
            t.reshape(bsz * blocks, context, module.num_heads, -1).transpose(1, 2)
            for t in (q, k, v)
        )
        rel = module.rel_pos_emb(attention_dists)
        pos_attn = torch.einsum("b h c d, c r d -> b h c r", q, rel) * module.scale
        index = torch.arange(context, device=padded.device)
        outside = (index[:, None] >= remainder) | (index[None, :] >= remainder)
        last = torch.arange(bsz * blocks, device=padded.device) % blocks == blocks - 1
        masked = last[:, None, None, None] & outside[None, None] & (remainder > 0)
        pos_attn = pos_attn.masked_fill(masked, -torch.finfo(pos_attn.dtype).max)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=pos_attn, scale=module.scale)
        out = out.transpose(1, 2).reshape(bsz, padded.shape[1], -1)
        return module.dropout(module.to_out(out[:, :frames, :]))

    module.forward = forward


def windows_by_floor(module: Any) -> None:
    # GraniteSpeechEncoderProjector counts its windows with math.ceil(frames / window_size), a
    # float of the frame count the trace fixes; -(-frames // window_size) is the same integer.
    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        batch, frames, dim = hidden_states.size()
        window = module.window_size
        blocks = -(-frames // window)
        hidden_states = F.pad(hidden_states, (0, 0, 0, blocks * window - frames))
        hidden_states = hidden_states.view(batch * blocks, window, dim)
        out = module.qformer(
            query_embeds=module.query,
            encoder_hidden_states=hidden_states,
            encoder_attention_mask=None,
            return_dict=True,
        )
        rows = out.last_hidden_state.view(batch, blocks * window // module.downsample_rate, -1)
        return module.linear(rows)

    module.forward = forward
