"""Granite Speech: the Conformer's block attention and the Q-Former's windows without branches
on the frame count."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def blocks_without_branch(module: torch.nn.Module) -> None:
    # GraniteSpeechConformerAttention pads the frames to whole blocks of context_size and masks
    # the last block's padding behind `if remainder > 0` on the frame count, which fixes the
    # count in the trace. Here the block count is the ceiling of frames / context_size and the
    # frames are padded to exactly that many blocks (so the cut into blocks is a plain unflatten
    # the trace need not guard), and a frame pair is masked where either lies past the last
    # frame: HF's last-block mask for every count, nothing when the count fills its blocks.
    def forward(hidden_states: torch.Tensor, attention_dists: torch.Tensor) -> torch.Tensor:
        context = module.context_size
        hidden_states = module.pre_norm(hidden_states)
        bsz, frames, _ = hidden_states.shape
        blocks = -(-frames // context)
        padded = F.pad(hidden_states, (0, 0, 0, blocks * context - frames))
        q = module.to_q(padded)
        k, v = module.to_kv(padded).chunk(2, dim=-1)
        q, k, v = (
            t.unflatten(2, (module.num_heads, -1))
            .unflatten(1, (blocks, context))
            .flatten(0, 1)
            .transpose(1, 2)
            for t in (q, k, v)
        )
        rel = module.rel_pos_emb(attention_dists)
        pos_attn = torch.einsum("b h c d, c r d -> b h c r", q, rel) * module.scale
        position = torch.arange(blocks * context, device=padded.device).view(blocks, context)
        past = position >= frames
        outside = past[:, :, None] | past[:, None, :]
        masked = outside.unsqueeze(0).expand(bsz, -1, -1, -1).flatten(0, 1).unsqueeze(1)
        pos_attn = pos_attn.masked_fill(masked, -torch.finfo(pos_attn.dtype).max)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=pos_attn, scale=module.scale)
        out = out.transpose(1, 2).flatten(2).unflatten(0, (bsz, blocks)).flatten(1, 2)
        return module.dropout(module.to_out(out[:, :frames, :]))

    module.forward = forward


def windows_by_floor(module: Any) -> None:
    # GraniteSpeechEncoderProjector counts its windows with math.ceil(frames / window_size), a
    # float of the frame count the trace fixes; -(-frames // window_size) is the same integer.
    # Its one learned query row set meets every window by broadcasting in the cross-attention,
    # which ONNX Attention does not do: the queries are expanded to one set per window.
    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        batch, frames, dim = hidden_states.size()
        window = module.window_size
        blocks = -(-frames // window)
        hidden_states = F.pad(hidden_states, (0, 0, 0, blocks * window - frames))
        hidden_states = hidden_states.unflatten(1, (blocks, window)).flatten(0, 1)
        out = module.qformer(
            query_embeds=module.query.expand(hidden_states.shape[0], -1, -1),
            encoder_hidden_states=hidden_states,
            encoder_attention_mask=None,
            return_dict=True,
        )
        rows = out.last_hidden_state.unflatten(0, (batch, blocks)).flatten(1, 2)
        return module.linear(rows)

    module.forward = forward
