"""Fallbacks a build took: what each cost (fused components, the KV cache) and why.

``synth/chain.py`` records one :class:`Fallback` per step down the chain (captured attention -> cache
carried through the trace -> one token at a time -> no cache). The build logs each as one
warning line, writes them to ``mobius.json`` and ``explain.json``, and ``strict`` refuses them.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from mobius.errors import StrictError

log = logging.getLogger("mobius")

# kinds, in the order the chain tries them
CARRIED_CACHE = "carried-cache"  # transformers' Cache carried through the trace
ONE_TOKEN_LOOP = "one-token-loop"  # traced for one token, run in an ONNX Loop over the sequence
NO_CACHE = "no-cache"  # built without a KV cache
MODEL_ATTENTION = "model-attention"  # transformers' own attention instead of the captured one
LENGTH_BOUND = "length-bound"  # the graph holds up to a length only (checked when it runs)
FIXED_IMAGE_SIZE = "fixed-image-size"  # a vision graph for one image size (checked when it runs)
KINDS = (CARRIED_CACHE, ONE_TOKEN_LOOP, NO_CACHE, MODEL_ATTENTION, LENGTH_BOUND, FIXED_IMAGE_SIZE)

FUSED_ATTENTION = "fused attention"
KV_CACHE = "kv cache"
PARALLEL_PREFILL = "parallel prefill"
ANY_LENGTH = "any length"
ANY_IMAGE_SIZE = "any image size"

_WHAT = {
    CARRIED_CACHE: "the cache is carried through the trace, attention lowered op by op",
    ONE_TOKEN_LOOP: "traced for one token and run over the sequence in an ONNX Loop",
    NO_CACHE: "building without a KV cache",
    MODEL_ATTENTION: "tracing transformers' own attention, lowered op by op",
    LENGTH_BOUND: "the graph holds up to a sequence length only; longer inputs fail when run",
    FIXED_IMAGE_SIZE: "the vision graph takes one image of one size per call; others fail when run",
}


@dataclass(frozen=True)
class Fallback:
    """One step down the fallback chain."""

    kind: str  # CARRIED_CACHE | ONE_TOKEN_LOOP | NO_CACHE | MODEL_ATTENTION
    reason: str  # why the better way did not work
    # what the model loses: FUSED_ATTENTION, KV_CACHE, PARALLEL_PREFILL, ANY_LENGTH
    costs: tuple[str, ...]

    def describe(self) -> str:
        """One line: what was done, what it costs, and why."""
        return f"{_WHAT[self.kind]} (costs {', '.join(self.costs)}): {self.reason}"

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["costs"] = list(self.costs)
        return data


def announce(fallbacks: list[Fallback]) -> None:
    """One warning line per fallback (shown by the CLI unless ``-q``)."""
    for fallback in fallbacks:
        log.warning("fallback: %s", fallback.describe())


def refuse(fallbacks: list[Fallback]) -> None:
    """``--strict``: any fallback is an error naming it and its reason."""
    if fallbacks:
        first = fallbacks[0]
        more = f" (and {len(fallbacks) - 1} more)" if len(fallbacks) > 1 else ""
        raise StrictError(
            f"--strict: the build would fall back{more}: {first.describe()}; "
            "drop --strict to accept a degraded graph"
        )
