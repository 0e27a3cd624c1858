"""Readers of the checkpoint kinds whose weights this package does not read itself.

``sources`` resolves a safetensors checkpoint on its own. A GGUF file (``mobius.gguf.source``)
and a GPTQ/AWQ checkpoint (``mobius.quant.prequantized``) are told apart here, but read by
packages that sit above this one (they need the weights writer and the block formats): each
registers its reader when imported, and ``resolve`` looks it up by kind. ``mobius.synth.prepare``,
the way every build and explain comes in, imports both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

GGUF = "gguf"  # a GGUF file: (path, need_weights=) -> Source
PREQUANTIZED = "prequantized"  # packed GPTQ/AWQ tensors: (entries, spec) -> Checkpoint

Reader = TypeVar("Reader", bound=Callable[..., Any])
READERS: dict[str, Callable[..., Any]] = {}


def reads(kind: str) -> Callable[[Reader], Reader]:
    """Register the decorated function (or class) as the reader of ``kind``."""

    def register(reader: Reader) -> Reader:
        READERS[kind] = reader
        return reader

    return register


def reader(kind: str) -> Callable[..., Any]:
    """The registered reader of ``kind``."""
    found = READERS.get(kind)
    if found is None:
        raise LookupError(
            f"no reader of {kind} checkpoints is registered; import the module that reads them "
            "(mobius.synth.prepare imports every one)"
        )
    return found
