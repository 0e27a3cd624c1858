"""HiDream-I1: its two patch layouts (square and not) in one graph, unpatchified by the grid's
sizes, and its token-choice experts run densely.

``HiDreamImageTransformer2DModel.patchify`` branches on ``height == width``: square latents
become their patch tokens; others are padded with zero tokens to ``max_seq`` (``max_resolution``'s
patch count) and a mask zeroes the padding's keys, which still weigh ``exp(0)`` each in every
softmax, so the padding changes the result (by 0.15 at 16 x 8 latents in the swept config).
``unpatchify`` cuts each row's tokens by ``img_sizes``, a tensor read back in a Python loop over
the batch. The padding tokens all start equal (zero latents, position (0, 0, 0)) and stay
equal through every block, so here one padding token stands for all of them: it is appended to
the patch tokens, its key zeroed as diffusers zeroes theirs, and its logit raised by
``log(count)`` in every attention (``count`` = ``max_seq`` - patches for non-square latents, 0
for square ones: ``log 0`` = -inf drops it), which gives each softmax the same sums as
``count`` equal keys. The output is unpatchified by the latents' (symbolic) grid.
``MOEFeedForwardSwiGLU.moe_infer`` sorts the tokens by expert and loops over
``bincount().cpu()``'s counts; here each expert runs over every token and adds its output
weighted by the token's gate for it (zero where the expert is not among the token's top k), in
the same expert order.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch
import torch.nn.functional as F


def _attention(
    state: dict,
    attn: Any,
    hidden_states: torch.Tensor,
    hidden_states_masks: torch.Tensor | None = None,
    encoder_hidden_states: torch.Tensor | None = None,
    image_rotary_emb: torch.Tensor | None = None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """``HiDreamAttnProcessor.__call__`` with the padding token's logit raised by
    ``state["log_count"]`` (the token at ``state["index"]`` of the keys)."""
    from diffusers.models.transformers.transformer_hidream_image import apply_rope

    dtype = hidden_states.dtype
    batch_size = hidden_states.shape[0]
    query_i = attn.q_rms_norm(attn.to_q(hidden_states)).to(dtype=dtype)
    key_i = attn.k_rms_norm(attn.to_k(hidden_states)).to(dtype=dtype)
    value_i = attn.to_v(hidden_states)
    head_dim = key_i.shape[-1] // attn.heads
    query_i = query_i.view(batch_size, -1, attn.heads, head_dim)
    key_i = key_i.view(batch_size, -1, attn.heads, head_dim)
    value_i = value_i.view(batch_size, -1, attn.heads, head_dim)
    if hidden_states_masks is not None:
        key_i = key_i * hidden_states_masks.view(batch_size, -1, 1, 1)
    if not attn.single:
        query_t = attn.q_rms_norm_t(attn.to_q_t(encoder_hidden_states)).to(dtype=dtype)
        key_t = attn.k_rms_norm_t(attn.to_k_t(encoder_hidden_states)).to(dtype=dtype)
        value_t = attn.to_v_t(encoder_hidden_states)
        query_t = query_t.view(batch_size, -1, attn.heads, head_dim)
        key_t = key_t.view(batch_size, -1, attn.heads, head_dim)
        value_t = value_t.view(batch_size, -1, attn.heads, head_dim)
        num_image_tokens, num_text_tokens = query_i.shape[1], query_t.shape[1]
        query = torch.cat([query_i, query_t], dim=1)
        key = torch.cat([key_i, key_t], dim=1)
        value = torch.cat([value_i, value_t], dim=1)
    else:
        query, key, value = query_i, key_i, value_i
    if query.shape[-1] == image_rotary_emb.shape[-3] * 2:
        query, key = apply_rope(query, key, image_rotary_emb)
    else:
        query_1, query_2 = query.chunk(2, dim=-1)
        key_1, key_2 = key.chunk(2, dim=-1)
        query_1, key_1 = apply_rope(query_1, key_1, image_rotary_emb)
        query = torch.cat([query_1, query_2], dim=-1)
        key = torch.cat([key_1, key_2], dim=-1)
    keys = torch.arange(key.shape[1], device=key.device)
    bias = torch.where(keys == state["index"], state["log_count"], 0.0).to(query.dtype)
    bias = bias.view(1, 1, 1, -1)
    hidden_states = F.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask=bias,
        dropout_p=0.0, is_causal=False,
    )  # fmt: skip
    hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, attn.heads * head_dim)
    hidden_states = hidden_states.to(query.dtype)
    if not attn.single:
        hidden_states_i, hidden_states_t = torch.split(
            hidden_states, [num_image_tokens, num_text_tokens], dim=1
        )
        return attn.to_out(hidden_states_i), attn.to_out_t(hidden_states_t)
    return attn.to_out(hidden_states)


def one_padding_token(module: torch.nn.Module) -> None:
    from diffusers.models.transformers.transformer_hidream_image import HiDreamAttention

    p = module.config.patch_size
    state: dict[str, Any] = {}
    for attention in module.modules():
        if isinstance(attention, HiDreamAttention):
            attention.processor = functools.partial(_attention, state)

    def patchify(self: Any, hidden_states: torch.Tensor) -> tuple:
        batch, channels, height, width = hidden_states.shape
        rows, cols = height // p, width // p
        device = hidden_states.device
        square = torch.full((), height, device=device) == width
        count = torch.where(square, 0, self.max_seq - rows * cols).to(torch.float32)
        state["index"], state["log_count"] = rows * cols, torch.log(count)
        ids = torch.stack(
            [
                torch.zeros(rows, cols, device=device),
                torch.arange(rows, device=device)[:, None].expand(rows, cols).float(),
                torch.arange(cols, device=device)[None, :].expand(rows, cols).float(),
            ],
            dim=-1,
        ).reshape(1, rows * cols, 3)
        ids = torch.cat([ids, ids.new_zeros(1, 1, 3)], dim=1)  # the padding token's: (0, 0, 0)
        tokens = hidden_states.reshape(batch, channels, rows, p, cols, p)
        tokens = tokens.permute(0, 2, 4, 3, 5, 1).reshape(batch, rows * cols, p * p * channels)
        tokens = torch.cat([tokens, tokens.new_zeros(batch, 1, tokens.shape[-1])], dim=1)
        masks = torch.ones(batch, rows * cols + 1, dtype=tokens.dtype, device=device)
        masks = torch.cat([masks[:, :-1], masks[:, -1:] * 0], dim=1)
        return tokens, masks, [(rows, cols)], ids.expand(batch, -1, -1)

    def unpatchify(self: Any, x: torch.Tensor, img_sizes: list, is_training: bool) -> torch.Tensor:
        rows, cols = img_sizes[0]
        batch = x.shape[0]
        channels = x.shape[-1] // (p * p)
        grid = x[:, : rows * cols].reshape(batch, rows, cols, p, p, channels)
        return grid.permute(0, 5, 1, 3, 2, 4).reshape(batch, channels, rows * p, cols * p)

    module.patchify = types.MethodType(patchify, module)
    module.unpatchify = types.MethodType(unpatchify, module)


def dense_experts(module: torch.nn.Module) -> None:
    def moe_infer(
        self: Any,
        x: torch.Tensor,
        flat_expert_indices: torch.Tensor,
        flat_expert_weights: torch.Tensor,
    ) -> torch.Tensor:
        k = self.num_activated_experts
        chosen = flat_expert_indices.view(-1, k)
        weights = flat_expert_weights.view(-1, k)
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            gate = (weights * (chosen == index).to(weights.dtype)).sum(-1, keepdim=True)
            out = out + expert(x) * gate
        return out

    module.moe_infer = types.MethodType(moe_infer, module)
