"""Which part of an encoder–decoder graph is being traced. The task's forward sets it around each
call it makes (``seq2seq.py``, ``seq2seq_images.py``); the captured attention
(``patterns/seq2seq_attention.py``) reads it to choose each call's mask.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GraphPhase:
    """What is being traced: ``encoder`` (its self-attention), ``placeholder`` (the encoder
    graph's decoder call, dead code but for the cross keys/values), or ``decoder``.
    ``padded_lengths``: the lengths of the inputs, when one is a padding mask (None: no padding
    input); ``cross_lengths``: the cross caches' lengths (decoder; one symbol per input)."""

    graph: str
    padded_lengths: tuple[int | torch.SymInt, ...] | None = None
    cross_lengths: tuple[int | torch.SymInt, ...] = ()


_PHASE: contextvars.ContextVar[GraphPhase | None] = contextvars.ContextVar(
    "mobius_seq2seq_phase", default=None
)


def enter_phase(current: GraphPhase) -> None:
    """Switch to ``current`` inside an enclosing ``phase`` block, which restores its own phase at
    its end (module hooks that mark where one part of a call ends and the next begins)."""
    _PHASE.set(current)


@contextlib.contextmanager
def phase(current: GraphPhase) -> Iterator[None]:
    token = _PHASE.set(current)
    try:
        yield
    finally:
        _PHASE.reset(token)


def current_phase() -> GraphPhase | None:
    """The phase set by the innermost ``phase`` block (or ``enter_phase``), None outside one."""
    return _PHASE.get()
