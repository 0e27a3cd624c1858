"""CANINE: the initial character encoder's chunked local attention as one masked attention.

``CanineAttention`` with ``local=True`` builds its chunks with a Python loop over the length
(``range(start, seq_len, stride)``): torch.export records one chunk count, so the graph holds for
one length only. Each query chunk ``[start, start + stride)`` attends to its key chunk
``[k * to_stride, k * to_stride + to_width)`` (the ``k``-th of each list, the first query
attending to every key when ``first_position_attends_to_all``), with the padding mask HF slices
from the 3-D character mask. The same scores over the whole length, with keys outside the query's
chunk at ``-inf`` (excluded exactly, as HF's slicing excludes them: a padding query whose whole
chunk is padding still spreads over its own chunk only), give the same attention for any length.

Only the chunk layout CANINE uses is rewritten: query chunks that tile the sequence (width equal
to stride) and no extra first key (``always_attend_to_first_position`` would count key 0 twice
when its chunk holds it); any other layout keeps HF's loop.
"""

from __future__ import annotations

from types import MethodType
from typing import Any

import torch


def _chunk_keys(module: torch.nn.Module, length: Any, device: torch.device) -> torch.Tensor:
    """``[length, length]`` bool: key ``j`` lies in the key chunk paired with query ``i``."""
    positions = torch.arange(length, device=device)
    start = 1 if module.first_position_attends_to_all else 0
    chunk = torch.div(positions - start, module.attend_from_chunk_stride, rounding_mode="floor")
    first_key = (chunk * module.attend_to_chunk_stride)[:, None]
    allowed = (positions[None, :] >= first_key) & (
        positions[None, :] < first_key + module.attend_to_chunk_width
    )
    if module.first_position_attends_to_all:
        allowed = allowed | (positions == 0)[:, None]
    return allowed


def dense_local_chunks(module: torch.nn.Module) -> None:
    """``CanineAttention``: local chunked attention as attention under a chunk mask."""
    if (
        not module.local
        or module.always_attend_to_first_position
        or module.attend_from_chunk_width != module.attend_from_chunk_stride
    ):
        return

    def forward(
        self: torch.nn.Module,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = False,
    ) -> tuple[torch.Tensor, ...]:
        length = hidden_states.shape[1]
        dtype = hidden_states.dtype
        allowed = _chunk_keys(self, length, hidden_states.device)
        bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        bias = bias.masked_fill(~allowed, float("-inf"))[None]
        if attention_mask is not None:  # HF's 3-D 0/1 mask, as CanineSelfAttention adds it
            bias = bias + (1.0 - attention_mask.float()).to(dtype) * torch.finfo(dtype).min
        outputs = self.self(hidden_states, hidden_states, bias[:, None], output_attentions)
        return (self.output(outputs[0], hidden_states),) + tuple(outputs[1:])

    module.forward = MethodType(forward, module)


def molecules_gathered(module: torch.nn.Module) -> None:
    """``CanineModel``: molecules repeated back to characters by one gather, and the character
    mask max-pooled to molecules over whole groups of ``rate`` (``MaxPool1d`` on CPU fixes the
    length while tracing; the pool drops a partial last group, and so does this).

    HF repeats each molecule ``downsampling_rate`` times and the last one
    ``length % rate + rate`` more times (``repeat_interleave`` with a count computed from the
    length, which torch.export fixes to the example's). Character ``p`` gets molecule
    ``min(1 + p // rate, last)`` (0 is [CLS], the last one when no molecule is whole): the same rows for every length."""

    def repeat(
        self: torch.nn.Module, molecules: torch.Tensor, char_seq_length: Any
    ) -> torch.Tensor:
        positions = torch.arange(char_seq_length, device=molecules.device)
        rate = self.config.downsampling_rate
        index = 1 + torch.div(positions, rate, rounding_mode="floor")  # molecule 0 is [CLS]
        return molecules.index_select(1, torch.clamp(index, max=molecules.shape[1] - 1))

    def downsample(
        self: torch.nn.Module, char_attention_mask: torch.Tensor, downsampling_rate: int
    ) -> torch.Tensor:
        rate = downsampling_rate
        molecules = torch.arange(
            char_attention_mask.shape[1] // rate, device=char_attention_mask.device
        )
        chars = molecules[:, None] * rate + torch.arange(rate, device=molecules.device)
        return char_attention_mask.float()[:, chars].amax(dim=-1)  # [batch, molecules]

    module._repeat_molecules = MethodType(repeat, module)
    module._downsample_attention_mask = MethodType(downsample, module)
