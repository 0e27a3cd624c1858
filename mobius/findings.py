"""What became of every module of a traced model: the plain data that ``synth`` fills
(``synth/analysis.py``), ``ep`` adds to (a decline where it keeps the generic attention) and
``report`` turns into the explain report. It imports nothing of mobius: every layer may use it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Decline:
    """A pattern looked at the module and left it to lowering."""

    pattern: str
    reason: str


@dataclass
class ComponentUse:
    """One component a pattern emitted inside a module, with the attributes it extracted."""

    pattern: str
    component: str
    attributes: dict[str, Any]


@dataclass
class ModuleAnalysis:
    """One module instance of the HF model."""

    path: str
    cls: str
    components: list[ComponentUse] = field(default_factory=list)
    lowered_ops: Counter = field(default_factory=Counter)  # aten op -> count, outside components
    blocked_ops: Counter = field(default_factory=Counter)  # aten op -> count, with no lowering
    declines: list[tuple[str, str]] = field(default_factory=list)  # (pattern, reason)
    parameters: int = 0  # elements of the parameters this module owns directly
    claimed_parameters: int = 0  # of those, elements read only by components
    nodes: int = 0
    claimed_nodes: int = 0


@dataclass
class Analysis:
    """The whole model: per-module results plus the facts the summary needs."""

    model_type: str
    task: str
    kv_cache: bool
    cache_supported: bool  # the task's contract has a KV cache at all
    unclaimed_attention: list[str]
    modules: list[ModuleAnalysis]
    cache_blocker: str | None = None  # why captured attention could not carry the cache
    traced_cache_layers: int = 0  # layers whose state the trace itself carries (synth/state.py)
    token_loop: bool = False  # traced for one token, run over the sequence in an ONNX Loop
    fallbacks: list[dict[str, object]] = field(default_factory=list)  # Fallback.to_dict()s
    # a vision-language model converted without its image path: why (tasks/vlm_unsplit.py)
    image_path_left_out: str | None = None
    genai_left_out: str | None = None  # a three-graph VLM onnxruntime-genai has no pipeline for

    @property
    def blocked(self) -> dict[str, list[str]]:
        """aten op -> modules that use it, for ops with no lowering."""
        out: dict[str, list[str]] = {}
        for module in self.modules:
            for op in module.blocked_ops:
                out.setdefault(op, []).append(module.path or "<model>")
        return out
