"""DeepSeek-V4: the compressors' window count kept symbolic in the sequence length (no cache).

Without a cache, HF's compressors (HCA, CSA and CSA's Lightning Indexer) keep the longest prefix
of whole windows, ``usable = (seq_len // rate) * rate``, and then branch in Python on what that
gives: ``if chunk_kv.shape[1] > 0`` (no window yet), ``if n_windows > 1`` (an overlap from the
previous window), ``if seq_len == 1 or compressed_len == 0`` (no block bias) and
``top_k = min(index_topk, compressed_len)``. torch.export turns each into a guard on the length,
so the trace held only for the lengths with as many windows as the traced one.

Here the tokens are zero-padded to two windows more than the whole ones, so the window count is
never 0 or 1 at any length: torch.export specialises sizes 0 and 1 (broadcasting), and the traced
length (7 tokens) is below HCA's rate (128), where ``ceil(seq_len / rate)`` would be 1. The two
padded windows (one of them partly real tokens) yield two extra compressed entries, which every
query masks out (``-inf`` in the block bias the attention adds, and never picked by
the indexer): the attention then weighs exactly the entries HF keeps (an extra ``-inf`` logit
adds nothing to a softmax; the attention's sinks keep every row finite). The indexer's top-k runs
with the constant ``index_topk`` over its scores padded by ``index_topk`` masked columns, so k
needs no ``min`` with the length; picks past a query's causal limit or past the whole windows are
dropped as HF drops its ``-1`` picks.

With a cache, the modules run HF's own forward (the cache's buffers of leftover tokens have no
fixed shape to carry; mobius builds this model without a cache).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch


def _hf(module: torch.nn.Module):
    return sys.modules[type(module).__module__]


def _windows(module: torch.nn.Module, hidden: torch.Tensor):
    """``(kv, gate)`` projected and zero-padded to ``whole + 2`` windows, as ``[B, W, rate, F]``,
    and the number ``whole`` of whole windows in the tokens."""
    rate = module.compress_rate
    seq_len = hidden.shape[1]
    whole = seq_len // rate
    pad = 2 * rate - seq_len % rate  # up to (whole + 2) * rate tokens
    kv = torch.nn.functional.pad(module.kv_proj(hidden), (0, 0, 0, pad))
    gate = torch.nn.functional.pad(module.gate_proj(hidden), (0, 0, 0, pad))
    batch = hidden.shape[0]
    kv = kv.reshape(batch, whole + 2, rate, kv.shape[-1])
    gate = gate.reshape(batch, whole + 2, rate, gate.shape[-1]) + module.position_bias
    return kv, gate, whole


def _overlapped(kv: torch.Tensor, gate: torch.Tensor, head_dim: int):
    """CSA's two series over ``2 * rate`` slots: the previous window's Ca, then this window's Cb.
    Window 0 has no previous window: zero kv and ``-inf`` gate (softmax weight 0), as in HF."""
    # shifted by one window (a window count of W - 1 would be 1 for a short traced length)
    prev_kv = torch.nn.functional.pad(kv[..., :head_dim], (0, 0, 0, 0, 1, 0))[:, :-1]
    prev_gate = torch.nn.functional.pad(
        gate[..., :head_dim], (0, 0, 0, 0, 1, 0), value=float("-inf")
    )[:, :-1]
    new_kv = torch.cat([prev_kv, kv[..., head_dim:]], dim=2)
    new_gate = torch.cat([prev_gate, gate[..., head_dim:]], dim=2)
    return new_kv, new_gate


def _compressed(module: torch.nn.Module, kv: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """One entry per window (``[B, W, head_dim]``), roped at the window's first position."""
    hf = _hf(module)
    compressed = module.kv_norm(
        (kv * gate.softmax(dim=2, dtype=torch.float32).to(kv.dtype)).sum(dim=2)
    )
    batch, windows = compressed.shape[0], compressed.shape[1]
    positions = torch.arange(windows, device=compressed.device) * module.compress_rate
    positions = positions.unsqueeze(0).expand(batch, -1)
    cos, sin = module.rotary_emb(
        compressed, position_ids=positions, layer_type=module.rope_layer_type
    )
    return hf.apply_rotary_pos_emb(compressed.unsqueeze(1), cos, sin).squeeze(1)


def _visible(module: torch.nn.Module, position_ids: torch.Tensor, windows: int, whole: int):
    """``[B, S, W]``: entry ``w`` is visible to a query at ``p`` iff ``w < (p + 1) // rate``
    (HF's causal threshold) and ``w`` is a whole window."""
    entries = torch.arange(windows, device=position_ids.device)
    threshold = (position_ids + 1) // module.compress_rate
    return (entries.view(1, 1, -1) < threshold.unsqueeze(-1)) & (entries.view(1, 1, -1) < whole)


def _without_a_cache(module: torch.nn.Module, compute: Callable[..., Any]) -> None:
    """Install ``compute(hidden_states, q_residual, position_ids, layer_idx)`` as the module's
    forward for calls without a cache; calls with one run HF's own forward."""
    original = module.forward

    def forward(hidden_states, q_residual, position_ids, cache=None, layer_idx=None, **kwargs):
        if cache is not None or kwargs:
            return original(hidden_states, q_residual, position_ids, cache, layer_idx, **kwargs)
        return compute(hidden_states, q_residual, position_ids, layer_idx)

    module.forward = forward


def hca_padded_windows(module: torch.nn.Module) -> None:
    # see the module docstring: HCA's window count branches on the length
    def compute(hidden_states, q_residual, position_ids, layer_idx):
        kv, gate, whole = _windows(module, hidden_states)
        compressed_kv = _compressed(module, kv, gate).unsqueeze(1)  # [B, 1, W, D]
        visible = _visible(module, position_ids, compressed_kv.shape[2], whole)
        block_bias = compressed_kv.new_zeros(visible.shape).masked_fill(~visible, float("-inf"))
        return compressed_kv, block_bias.unsqueeze(1).expand(hidden_states.shape[0], -1, -1, -1)

    _without_a_cache(module, compute)


def csa_padded_windows(module: torch.nn.Module) -> None:
    # see the module docstring: CSA's window count and overlap branch on the length
    def compute(hidden_states, q_residual, position_ids, layer_idx):
        batch, seq_len, _ = hidden_states.shape
        kv, gate, _ = _windows(module, hidden_states)
        kv, gate = _overlapped(kv, gate, module.head_dim)
        compressed_kv = _compressed(module, kv, gate).unsqueeze(1)  # [B, 1, W, D]
        windows = compressed_kv.shape[2]
        picks = module.indexer(hidden_states, q_residual, position_ids, None, layer_idx)
        valid = picks >= 0
        safe = torch.where(valid, picks, torch.full_like(picks, windows))
        block_bias = compressed_kv.new_full((batch, 1, seq_len, windows + 1), float("-inf"))
        block_bias = block_bias.scatter(-1, safe.unsqueeze(1), 0.0)
        return compressed_kv, block_bias[..., :windows]

    _without_a_cache(module, compute)


def indexer_padded_windows(module: torch.nn.Module) -> None:
    # see the module docstring: the indexer's window count and top-k size branch on the length
    def compute(hidden_states, q_residual, position_ids, layer_idx):
        hf = _hf(module)
        batch, seq_len, _ = hidden_states.shape
        kv, gate, whole = _windows(module, hidden_states)
        kv, gate = _overlapped(kv, gate, module.head_dim)
        compressed = _compressed(module, kv, gate)  # [B, W, D]
        cos_q, sin_q = module.rotary_emb(
            hidden_states, position_ids=position_ids, layer_type=module.rope_layer_type
        )
        q = module.q_b_proj(q_residual).view(batch, seq_len, -1, module.head_dim).transpose(1, 2)
        q = hf.apply_rotary_pos_emb(q, cos_q, sin_q).transpose(1, 2)
        scores = module.scorer(q, compressed, hidden_states)  # [B, S, W]
        visible = _visible(module, position_ids, compressed.shape[1], whole)
        scores = scores.masked_fill(~visible, float("-inf"))
        # index_topk more masked columns: a constant k, whatever the number of windows
        scores = torch.nn.functional.pad(scores, (0, module.index_topk), value=float("-inf"))
        picks = scores.topk(module.index_topk, dim=-1).indices
        limit = torch.minimum(
            (position_ids + 1) // module.compress_rate, torch.full_like(position_ids, whole)
        )
        return torch.where(picks >= limit.unsqueeze(-1), torch.full_like(picks, -1), picks)

    _without_a_cache(module, compute)
