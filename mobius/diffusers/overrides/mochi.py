"""Mochi: joint attention over the valid prompt tokens as one masked attention over the batch;
the VAE's group norm and frame attention without their memory chunks."""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

from mobius.diffusers.overrides.valid_first import valid_first


class MaskedJointAttnProcessor:
    """``MochiAttnProcessor2_0`` without its Python loop over the batch.

    diffusers' processor loops over the rows of the batch (so torch.export fixes the batch): for
    each row it attends over the image tokens and that row's valid prompt tokens (``nonzero`` of
    the mask), and pads the output with zeros to the full length, so the prompt outputs come
    first, compacted, in prompt order. Here every row attends at once with the invalid prompt keys
    masked out (the same softmax: masked keys weigh 0), and the prompt outputs are compacted by a
    0/1 matrix (``P[b, j, i] = 1`` when token ``i`` is row ``b``'s ``j``-th valid one), which
    moves each value unchanged and leaves zeros after the last valid token."""

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        image_rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        query, key, value = _heads(
            attn, hidden_states, (attn.to_q, attn.to_k, attn.to_v), attn.norm_q, attn.norm_k
        )
        encoder_query, encoder_key, encoder_value = _heads(
            attn,
            encoder_hidden_states,
            (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj),
            attn.norm_added_q,
            attn.norm_added_k,
        )
        if image_rotary_emb is not None:
            query = _rotary(query, *image_rotary_emb)
            key = _rotary(key, *image_rotary_emb)

        sequence_length = query.size(1)
        encoder_sequence_length = encoder_query.size(1)
        valid = attention_mask != 0  # [batch, prompt]
        keep = torch.cat([torch.ones_like(valid[:, :1]).expand(-1, sequence_length), valid], 1)
        out = F.scaled_dot_product_attention(
            torch.cat([query, encoder_query], 1).transpose(1, 2),
            torch.cat([key, encoder_key], 1).transpose(1, 2),
            torch.cat([value, encoder_value], 1).transpose(1, 2),
            attn_mask=keep[:, None, None, :],
            dropout_p=0.0,
            is_causal=False,
        )  # [batch, heads, tokens, dim]
        image_out, prompt_out = out.split_with_sizes(
            (sequence_length, encoder_sequence_length), dim=2
        )
        moves = valid_first(valid) & valid[:, None, :]  # [b, j, i]
        prompt_out = torch.einsum("bji,bhid->bhjd", moves.to(prompt_out.dtype), prompt_out)

        hidden_states = image_out.transpose(1, 2).flatten(2, 3)
        encoder_hidden_states = prompt_out.transpose(1, 2).flatten(2, 3)
        hidden_states = attn.to_out[1](attn.to_out[0](hidden_states))
        if hasattr(attn, "to_add_out"):
            encoder_hidden_states = attn.to_add_out(encoder_hidden_states)
        return hidden_states, encoder_hidden_states


def _heads(
    attn: Any,
    states: torch.Tensor,
    projections: tuple[Any, Any, Any],
    norm_q: Any,
    norm_k: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query, key and value of ``states`` split into heads, query and key normed where the
    module has the norm."""
    query, key, value = (p(states).unflatten(2, (attn.heads, -1)) for p in projections)
    query = query if norm_q is None else norm_q(query)
    key = key if norm_k is None else norm_k(key)
    return query, key, value


def _rotary(x: torch.Tensor, freqs_cos: torch.Tensor, freqs_sin: torch.Tensor) -> torch.Tensor:
    """Mochi's interleaved rotary embedding, as its processor applies it."""
    x_even = x[..., 0::2].float()
    x_odd = x[..., 1::2].float()
    cos = (x_even * freqs_cos - x_odd * freqs_sin).to(x.dtype)
    sin = (x_even * freqs_sin + x_odd * freqs_cos).to(x.dtype)
    return torch.stack([cos, sin], dim=-1).flatten(-2)


def masked_joint_attention(module: torch.nn.Module) -> None:
    module.processor = MaskedJointAttnProcessor()


def centers_by_arange(module: torch.nn.Module) -> None:
    # MochiRoPE._centers takes the midpoints of `linspace(start, stop, num + 1)`, with `num` the
    # latents' height or width in patches and `start`, `stop` symbolic floats: the graph kept the
    # traced count (positions for 12x20 patches at every size). The midpoints are
    # `start + (i + 1/2) * step` for `i` in `arange(num)`, the same values (within float32's
    # rounding of linspace's own steps).
    def _centers(self: Any, start: Any, stop: Any, num: Any, device: Any, dtype: Any) -> Any:
        step = (stop - start) / num
        index = torch.arange(num, device=device, dtype=torch.float32)
        return ((index + 0.5) * step + start).to(dtype or torch.float32)

    module._centers = types.MethodType(_centers, module)


def whole_group_norm(module: torch.nn.Module) -> None:
    # MochiChunkedGroupNorm3D normalises each frame as an image, in chunks of 8 frames
    # (`x.split(8)` over batch x frames, a memory bound): the split of that dynamic axis has
    # traced part sizes. Group norm normalises each image on its own, so one call over all
    # of them gives the same values.
    def forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        batch_size = x.size(0)
        x = self.norm_layer(x.permute(0, 2, 1, 3, 4).flatten(0, 1))
        return x.unflatten(0, (batch_size, -1)).permute(0, 2, 1, 3, 4)

    module.forward = types.MethodType(forward, module)


def unchunked_attention(module: torch.nn.Module) -> None:
    # MochiDownBlock3D attends over the frames of each pixel in chunks of 2**15 pixels (a CUDA
    # launch limit): the branch on `batch * height * width <= 2**15` bounds those sizes in the
    # trace. Each pixel's attention is its own, so one call over every pixel is the same.
    def forward(
        self: Any, hidden_states: torch.Tensor, conv_cache: dict | None = None, chunk_size: int = 0
    ) -> tuple[torch.Tensor, dict]:
        new_conv_cache: dict = {}
        conv_cache = conv_cache or {}
        hidden_states, new_conv_cache["conv_in"] = self.conv_in(hidden_states)
        for i, (resnet, norm, attn) in enumerate(
            zip(self.resnets, self.norms, self.attentions, strict=True)
        ):
            key = f"resnet_{i}"
            hidden_states, new_conv_cache[key] = resnet(hidden_states, conv_cache.get(key))
            if attn is not None:
                residual = hidden_states
                hidden_states = norm(hidden_states)
                batch_size, _, _, height, width = hidden_states.shape
                hidden_states = hidden_states.permute(0, 3, 4, 2, 1).flatten(0, 2).contiguous()
                hidden_states = attn(hidden_states)
                hidden_states = hidden_states.unflatten(0, (batch_size, height, width))
                hidden_states = residual + hidden_states.permute(0, 4, 3, 1, 2)
        return hidden_states, new_conv_cache

    module.forward = types.MethodType(forward, module)
