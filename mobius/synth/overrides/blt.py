"""BLT (Byte Latent Transformer): the n-gram hashes without ``unfold``'s overlapping windows, and
eager attention in the byte-level encoder and decoder."""

from __future__ import annotations

import functools

import torch


def _wrapped_power(prime: int, exponent: int) -> int:
    """``prime ** exponent`` as int64 arithmetic gives it (modulo 2**64, signed)."""
    value = pow(prime, exponent, 1 << 64)
    return value - (1 << 64) if value >= 1 << 63 else value


def _byte_group_hash(
    token_ids: torch.Tensor, group_size: int = 2, prime: int = 1000000007, max_hash: int = 30000
) -> torch.Tensor:
    """HF's ``byte_group_hash_function``: the hash of each token's group of ``group_size`` tokens
    ending at it (zeros before the first), ``sum_j token[t - group_size + 1 + j] * prime**j``, in
    int64 that wraps around, modulo ``max_hash``. The sum of shifted slices wraps the same way as
    HF's sum over ``unfold`` windows (integer addition and multiplication modulo 2**64 do not
    depend on the order)."""
    batch, length = token_ids.shape[0], token_ids.shape[1]
    padding = torch.zeros(batch, group_size - 1, dtype=torch.int64, device=token_ids.device)
    padded = torch.cat([padding, token_ids], dim=1)
    hashes = padded[:, :length] * _wrapped_power(prime, 0)
    for j in range(1, group_size):
        hashes = hashes + padded[:, j : j + length] * _wrapped_power(prime, j)
    return hashes % max_hash


def hashes_without_unfold(module: torch.nn.Module) -> None:
    # BltModel.forward embeds n-gram hashes of the bytes (compute_hash_embeddings ->
    # byte_group_hash_function), whose windows come from padded.unfold(1, group_size, 1): a view
    # with overlapping strides [L + g - 1, 1, 1]. Multiplying it by the powers makes torch.export
    # compare those strides with the sizes (the output's memory layout), one inequality per group
    # size (L >= 3, ..., L >= 7, L < 8 for groups 3..8 and 7 tokens): together they fix the
    # length to the traced one. The same hashes as a sum of shifted slices keep it symbolic.
    # The function is a module global that BltModel.forward calls, so it is swapped for the
    # duration of this instance's forward only.
    from unittest import mock

    from transformers.models.blt import modeling_blt

    forward = module.forward

    @functools.wraps(forward)
    def hashed_forward(*args, **kwargs):
        with mock.patch.object(modeling_blt, "byte_group_hash_function", _byte_group_hash):
            return forward(*args, **kwargs)

    module.forward = hashed_forward


def eager_local_attention(module: torch.nn.Module) -> None:
    # BLT lets padded bytes reach real ones: the patcher, the patch pooling and the global
    # transformer take no padding mask, so a left-padded byte's hidden state is pooled into a
    # patch that later patches attend to. A padded byte is a fully masked query row in the local
    # encoder's and decoder's self-attention, and transformers' eager and sdpa disagree on that
    # row (uniform weights over every key, against zeros), which changes real logits (by 1e-2 on
    # the tiny model). The other attention layers have no fully masked row (the patcher and the
    # global transformer are causal without padding; the cross-attention masks are additive, on
    # which eager and sdpa agree). Parity is measured against eager attention, so these two
    # stacks run it whichever implementation the trace asked for.
    for config in (module.config.encoder_config, module.config.decoder_config):
        config._attn_implementation = "eager"


def traceable(module: torch.nn.Module) -> None:
    """Both BltModel overrides above."""
    hashes_without_unfold(module)
    eager_local_attention(module)
