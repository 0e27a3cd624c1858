"""AnyFlow FAR: its flex-attention ``BlockMask`` as a dense boolean mask, its attention as SDPA,
its KV cache written functionally, and its rotary tables' empty-grid checks made per axis.

``AnyFlowCausalAttnProcessor`` pads queries, keys and values with zeros to a multiple of 128
tokens (flex's block size) and calls flex attention under the ``BlockMask`` that
``_build_far_block_mask_from_far_cfg`` makes with ``create_block_mask`` from a Python
``mask_mod`` at the padded int length (the chunk-causal FAR layout: a token sees the tokens of
its own chunk and of earlier ones; padding masked). Neither the ``BlockMask`` nor flex attention
goes into a graph with dynamic sizes, and the padded length (``math.ceil`` of the token count
over 128) fixed the grid in the trace. Eager flex applies ``mask_mod`` to every score (checked
equal to SDPA under ``create_mask``'s dense mask within 1.4e-6), which is also what the compiled
kernel computes, so eager diffusers is the reference. Here the forward builds ``far_dense_mask``
instead, ``mask_mod``'s rule over the real tokens' chunk indices (equal to ``create_mask``'s
mask on them: tests/mobius/diffusers/test_anyflow_far.py), and the processor runs SDPA under it
on the unpadded tokens: the padding's rows and columns are masked out, so dropping them changes
no real token's output. Without a mask (the autoregressive step reading the KV cache) flex
attends to the zero padding as well, each padded key a logit of 0 with a zero value: the
processor appends those zero keys and values, ``(-tokens) mod 128`` of them, as the model does.
Flex's padding of a head dim below 16 with zeros and its scale ``1/sqrt(head_dim)`` are SDPA's
default scale on the unpadded head. The cache step writes the new keys and values into the
cache's buffers in place; here the cache dict's entries are replaced by written copies, which
the graph gives as outputs.

``AnyFlowCausalRotaryPosEmbed``'s full and compressed tables return an empty table when
``min(frames, rows, cols) <= 0``: as for AnyFlow (``overrides/anyflow.py``), Python's ``min`` of
traced sizes records relations between axes, so the check is made on each axis alone (no size is
below 1: the table is the model's). The compressed table average-pools the complex float64
table, for which onnxruntime has no ``AveragePool``: a mean over a reshape.
"""

from __future__ import annotations

import functools
import types
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F

from mobius.diffusers.overrides.anyflow import full_frame_check_per_axis, grid_table

FLEX_BLOCK = 128  # the processor pads the sequence to a multiple of this


def far_dense_mask(far_cfg: dict[str, Any], has_clean: bool, device: Any) -> torch.Tensor:
    """``_build_far_block_mask_from_far_cfg``'s ``mask_mod`` over the real tokens, as a dense
    ``[tokens, tokens]`` bool tensor (True: attend). Each token's chunk index (the compressed
    context's chunks, then the full ones, then the clean copy of the full ones where
    ``has_clean``): a query sees keys of its chunk and earlier ones; with the clean copy, clean
    queries see no noisy key, and noisy queries see noisy keys of their own chunk only and clean
    keys of earlier chunks only."""
    chunks, context = far_cfg["chunk_partition"], far_cfg["num_compressed_chunk"]
    per_frame = [far_cfg["compressed_token_per_frame"]] * context
    per_frame += [far_cfg["full_token_per_frame"]] * (len(chunks) - context)
    index = torch.cat([torch.full((n * size,), float(i), device=device)
                       for i, (n, size) in enumerate(zip(chunks, per_frame, strict=True))])  # fmt: skip
    context_tokens = far_cfg["num_compressed_frames"] * far_cfg["compressed_token_per_frame"]
    if has_clean:
        index = torch.cat([index, index[context_tokens:]])
    allowed = index[:, None] >= index[None, :]
    if not has_clean:
        return allowed
    positions = torch.arange(index.shape[0], device=device)
    noise_end = context_tokens + far_cfg["num_full_frames"] * far_cfg["full_token_per_frame"]
    noise = (positions >= context_tokens) & (positions < noise_end)
    clean = positions >= noise_end
    same = index[:, None] == index[None, :]
    clean_to_noise = clean[:, None] & noise[None, :]
    noise_to_noise = noise[:, None] & noise[None, :]
    noise_to_clean_same = noise[:, None] & clean[None, :] & same
    return allowed & ~clean_to_noise & (~noise_to_noise | same) & ~noise_to_clean_same


class DenseCausalAttnProcessor:
    """``AnyFlowCausalAttnProcessor`` with SDPA in place of flex attention: under the dense mask
    (cut to the real tokens) where the model passes a mask, else over the keys and the zero
    padding flex attends to."""

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        rotary_emb: dict[str, torch.Tensor] | None = None,
        kv_cache: dict[str, torch.Tensor] | None = None,
        kv_cache_flag: dict[str, Any] | None = None,
    ) -> torch.Tensor:
        from diffusers.models.transformers.transformer_anyflow_far import apply_rotary_emb

        source = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        dtype = hidden_states.dtype
        query = attn.norm_q(attn.to_q(hidden_states)).to(dtype)
        key = attn.norm_k(attn.to_k(source)).to(dtype)
        value = attn.to_v(source)
        query, key, value = (t.unflatten(2, (attn.heads, -1)).transpose(1, 2)
                             for t in (query, key, value))  # fmt: skip
        if kv_cache is not None:
            key, value = _through_cache(kv_cache, kv_cache_flag, key, value)
        if rotary_emb is not None:
            query = apply_rotary_emb(query, rotary_emb["query"])
            key = apply_rotary_emb(key, rotary_emb["key"])
        tokens = query.shape[2]
        if attention_mask is not None:
            mask = attention_mask[:tokens, : key.shape[2]]
        else:  # flex's zero padding, unmasked: each padded key a logit of 0 and a zero value
            mask = None
            padding = (-tokens) % FLEX_BLOCK
            zeros = key.new_zeros(key.shape[0], key.shape[1], padding, key.shape[3])
            key, value = torch.cat([key, zeros], dim=2), torch.cat([value, zeros], dim=2)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
        out = out.transpose(1, 2).flatten(2, 3).type_as(query)
        return attn.to_out[1](attn.to_out[0](out))


def _through_cache(
    kv_cache: dict[str, torch.Tensor], flag: dict[str, Any], key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The processor's cache step or its read, as diffusers does them. The cache step writes the
    new keys and values (the compressed context's tokens, then the full ones) over the first
    tokens of each buffer; here the dict's entries are replaced by the written buffers (the
    rest of each buffer kept), where diffusers writes into them in place. The read puts the
    cached tokens before the new ones."""
    compressed, full = kv_cache["compressed_cache"], kv_cache["full_cache"]
    if flag["is_cache_step"]:
        n = flag["num_compressed_tokens"]
        kv_cache["compressed_cache"] = _written(compressed, key[:, :, :n], value[:, :, :n])
        kv_cache["full_cache"] = _written(full, key[:, :, n:], value[:, :, n:])
        return key, value
    n_compressed, n_full = flag["num_cached_compressed_tokens"], flag["num_cached_full_tokens"]
    key = torch.cat([compressed[0, :, :, :n_compressed], full[0, :, :, :n_full], key], dim=2)
    value = torch.cat([compressed[1, :, :, :n_compressed], full[1, :, :, :n_full], value], dim=2)
    return key, value


def _written(buffer: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``buffer`` ``[2, batch, heads, length, head_dim]`` with its first tokens replaced by
    ``key`` and ``value``."""
    written = torch.stack([key, value])
    return torch.cat([written, buffer[:, :, :, written.shape[3] :]], dim=3)


def dense_causal_attention(module: torch.nn.Module) -> None:
    """Install the SDPA processor on an ``AnyFlowAttention`` whose processor is the causal one
    (the FAR self-attention; its cross-attention keeps diffusers' processor)."""
    from diffusers.models.transformers.transformer_anyflow_far import AnyFlowCausalAttnProcessor

    if isinstance(module.processor, AnyFlowCausalAttnProcessor):
        module.set_processor(DenseCausalAttnProcessor())


def dense_mask_in_forward(module: torch.nn.Module) -> None:
    """Run ``AnyFlowFARTransformer3DModel``'s forward with the dense mask (``far_dense_mask``) in
    place of the ``BlockMask`` it builds when none is passed."""
    from diffusers.models.transformers import transformer_anyflow_far

    forward = module.forward

    @functools.wraps(forward)
    def forward_dense(*args: Any, **kwargs: Any) -> Any:
        with mock.patch.object(
            transformer_anyflow_far, "_build_far_block_mask_from_far_cfg", far_dense_mask
        ):
            return forward(*args, **kwargs)

    module.forward = forward_dense


def rotary_checks_per_axis(module: torch.nn.Module) -> None:
    """The full table's check per axis (AnyFlow's), and the compressed table's likewise."""
    full_frame_check_per_axis(module)
    module._forward_compressed_frame = types.MethodType(_compressed_frame, module)
    module.avg_pool_complex = types.MethodType(_avg_pool_complex, module)


def _avg_pool_complex(
    self: torch.nn.Module, freq: torch.Tensor, kernel_size: int, stride: int
) -> torch.Tensor:
    """``avg_pool_complex`` (the positions' unit complex numbers averaged over windows of
    ``kernel_size``, then made unit again) as a mean over a reshape: ``avg_pool1d`` of a float64
    table has no onnxruntime kernel. The model pools with ``stride == kernel_size``; the last
    positions that fill no window are dropped, as ``avg_pool1d`` drops them."""
    if stride != kernel_size:
        raise NotImplementedError("the FAR rotary table pools windows that do not overlap")
    windows = freq.shape[0] // kernel_size

    def pool(part: torch.Tensor) -> torch.Tensor:
        return part[: windows * kernel_size].unflatten(0, (windows, kernel_size)).mean(1)

    pairs = torch.view_as_real(freq)  # ``.real``/``.imag`` would need a decomposition's retrace
    real, imag = pool(pairs[..., 0]), pool(pairs[..., 1])
    norm = torch.sqrt(real**2 + imag**2)
    return torch.complex(real / norm, imag / norm)


def _compressed_frame(
    self: torch.nn.Module, num_frames: int, height: int, width: int, device: torch.device
) -> torch.Tensor:
    """``AnyFlowCausalRotaryPosEmbed._forward_compressed_frame`` with its check per axis: each
    axis's table average-pooled by the compressed patch's downscale (complex, renormalised)."""
    downscale = [c // p for c, p in zip(self.compressed_patch_size, self.patch_size, strict=True)]

    def pool(tables: list[torch.Tensor]) -> list[torch.Tensor]:
        return [
            self.avg_pool_complex(f, kernel_size=d, stride=d)
            for f, d in zip(tables, downscale, strict=True)
        ]

    return grid_table(self, num_frames, height, width, device, pool)
