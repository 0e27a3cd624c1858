"""The explain report as plain data: per-module results, a summary, next steps, and its JSON.

The JSON layout is documented in ``docs/explain-schema.md`` and checked by ``schema.SCHEMA``;
bump ``SCHEMA_VERSION`` on any change that is not a pure addition of optional fields.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from mobius.findings import Analysis, Decline, ModuleAnalysis
from mobius.report.paths import describe

SCHEMA_VERSION = 2  # 2: ``weights`` (each weight's storage: float or its quantization scheme)
STATUSES = ("component", "lowered", "blocked", "empty")
VERDICTS = {"full": 0, "fallback": 1, "blocked": 2}  # verdict -> exit status of `mobius explain`


@dataclass
class Component:
    """A pattern claimed (part of) the module and emitted this component."""

    pattern: str
    component: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModuleReport:
    """One module instance; ops are the ones it runs itself, not its children's.

    ``status``: ``blocked`` (an op has no lowering), ``component`` (a pattern claimed some of its
    ops; the rest, usually reshapes, are lowered), ``lowered`` (op by op only), ``empty`` (a
    container that runs no op of its own).
    """

    path: str
    cls: str
    status: str
    components: list[Component] = field(default_factory=list)
    lowered_ops: dict[str, int] = field(default_factory=dict)
    blocked_ops: dict[str, int] = field(default_factory=dict)
    declines: list[Decline] = field(default_factory=list)
    parameters: int = 0
    component_parameters: int = 0
    nodes: int = 0
    component_nodes: int = 0


@dataclass
class Gap:
    """Something that keeps the conversion from being complete, and what to do about it."""

    kind: str  # "lowering" | "pattern" | "cache" | "attention" | "image"
    subject: str  # the aten op, or the pattern name
    modules: list[str]
    next_step: str


@dataclass
class Summary:
    verdict: str  # "full" | "fallback" | "blocked"
    exit_code: int
    nodes: int
    component_nodes: int
    lowered_nodes: int
    blocked_nodes: int
    parameters: int
    component_parameters: int
    node_coverage: float  # component_nodes / nodes
    parameter_coverage: float  # component_parameters / parameters
    kv_cache: bool  # the model reads and returns a KV cache
    cache_supported: bool  # the task's contract has a cache at all
    cache_layers: int  # layers that keep a cache (attention components, or carried by the trace)
    unsupported_ops: dict[str, list[str]]  # aten op -> modules that use it
    gaps: list[Gap]
    # steps down the fallback chain the build took: kind, reason, costs (mobius/fallbacks.py)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Report:
    """What ``mobius explain`` found: ``modules`` in tree order, and a ``summary``; rendered by
    ``text.py`` and ``html.py`` (``ExplainReport``, in this package's ``__init__``, has both)."""

    source: str
    model_type: str
    task: str
    modules: list[ModuleReport]
    summary: Summary
    # how each weight is stored (mobius/report/weights.py); filled by a build, which makes the
    # graph: ``mobius explain`` alone emits none and leaves it empty
    weights: list[dict[str, Any]] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        """0 converts fully, 1 converts without a KV cache (fallback), 2 blocked."""
        return self.summary.exit_code

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {"schema_version": data.pop("schema_version"), **data}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=_json_default)

    @classmethod
    def from_analysis(cls, analysis: Analysis, source: str) -> Report:
        modules = [_module(m) for m in analysis.modules]
        return cls(
            source=source,
            model_type=analysis.model_type,
            task=analysis.task,
            modules=modules,
            summary=_summary(analysis, modules),
        )


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def _clean(value: Any) -> Any:
    """Attribute values as JSON-safe plain data (non-finite floats become strings)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _module(m: ModuleAnalysis) -> ModuleReport:
    if m.blocked_ops:
        status = "blocked"
    elif m.components:
        status = "component"
    elif m.lowered_ops:
        status = "lowered"
    else:
        status = "empty"
    return ModuleReport(
        path=m.path,
        cls=m.cls,
        status=status,
        components=[Component(c.pattern, c.component, _clean(c.attributes)) for c in m.components],
        lowered_ops=dict(sorted(m.lowered_ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        blocked_ops=dict(sorted(m.blocked_ops.items())),
        declines=[Decline(p, r) for p, r in m.declines],
        parameters=m.parameters,
        component_parameters=m.claimed_parameters,
        nodes=m.nodes,
        component_nodes=m.claimed_nodes,
    )


def _summary(analysis: Analysis, modules: list[ModuleReport]) -> Summary:
    nodes = sum(m.nodes for m in modules)
    claimed = sum(m.component_nodes for m in modules)
    blocked = sum(sum(m.blocked_ops.values()) for m in modules)
    params = sum(m.parameters for m in modules)
    claimed_params = sum(m.component_parameters for m in modules)
    unsupported = {op: mods for op, mods in sorted(analysis.blocked.items())}
    no_cache = analysis.cache_supported and not analysis.kv_cache
    attention = sum(c.component == "Attention" for m in modules for c in m.components)
    cache_layers = (analysis.traced_cache_layers or attention) if analysis.kv_cache else 0
    verdict = "blocked" if unsupported else "fallback" if no_cache else "full"
    return Summary(
        verdict=verdict,
        exit_code=VERDICTS[verdict],
        nodes=nodes,
        component_nodes=claimed,
        lowered_nodes=nodes - claimed - blocked,
        blocked_nodes=blocked,
        parameters=params,
        component_parameters=claimed_params,
        node_coverage=round(claimed / nodes, 4) if nodes else 0.0,
        parameter_coverage=round(claimed_params / params, 4) if params else 0.0,
        kv_cache=cache_layers > 0,
        cache_supported=analysis.cache_supported,
        cache_layers=cache_layers,
        unsupported_ops=unsupported,
        gaps=_gaps(analysis, modules, unsupported),
        fallbacks=list(analysis.fallbacks),
    )


def _gaps(
    analysis: Analysis, modules: list[ModuleReport], unsupported: dict[str, list[str]]
) -> list[Gap]:
    gaps = [
        Gap("lowering", op, mods, f"add a lowering for {op} used in {describe(mods)}")
        for op, mods in unsupported.items()
    ]
    if analysis.traced_cache_layers:
        gaps.append(
            Gap(
                "cache",
                "traced",
                list(analysis.unclaimed_attention),
                "the cache is carried through the trace by transformers' own Cache (its layers "
                f"lowered op by op), because {analysis.cache_blocker}"
                + (
                    "; the model is traced for one token and run over the sequence in an ONNX Loop"
                    if analysis.token_loop
                    else ""
                )
                + "; a pattern for these layers would fuse them",
            )
        )
    elif analysis.cache_supported and not analysis.kv_cache and not analysis.unclaimed_attention:
        reason = analysis.cache_blocker or "the graph cannot carry a cache"
        gaps.append(Gap("cache", "model", [], f"no KV cache: {reason}"))
    elif analysis.cache_supported and not analysis.kv_cache:
        where = analysis.unclaimed_attention
        classes = sorted({m.cls for m in modules if m.path in set(where)})
        gaps.append(
            Gap(
                "cache",
                "attention",
                list(where),
                f"no KV cache: attention in {describe(where)} does not call transformers' "
                f"AttentionInterface; add a structural attention pattern for "
                f"{', '.join(classes) or 'these modules'} (or route it through the interface)"
                + (f" ({analysis.cache_blocker})" if analysis.cache_blocker else ""),
            )
        )
    elif analysis.unclaimed_attention:  # a single graph: attention lowered op by op
        gaps.extend(_op_by_op_attention(modules, analysis.unclaimed_attention))
    declined: dict[tuple[str, str], list[str]] = {}
    covered = set(analysis.unclaimed_attention)  # already a "cache" or "attention" gap
    for m in modules:
        for d in m.declines:
            if d.pattern == "attention" and m.path in covered:
                continue
            declined.setdefault((d.pattern, d.reason), []).append(m.path)
    gaps.extend(
        Gap(
            "pattern",
            pattern,
            mods,
            f"pattern {pattern} declined in {describe(mods)} because {reason}",
        )
        for (pattern, reason), mods in declined.items()
    )
    if analysis.image_path_left_out:
        gaps.append(
            Gap(
                "image",
                "image-path",
                [],
                f"the image path is not converted (task {analysis.task}): "
                + analysis.image_path_left_out,
            )
        )
    if analysis.genai_left_out:
        gaps.append(
            Gap(
                "genai",
                "onnxruntime-genai",
                [],
                f"no genai_config.json: {analysis.genai_left_out}; the graphs run in "
                "onnxruntime (mobius.runtime.vlm)",
            )
        )
    return gaps


def _op_by_op_attention(modules: list[ModuleReport], unclaimed: list[str]) -> list[Gap]:
    """One gap per reason the capture missed attention in a graph without a cache: the model's
    own attention (its mask or bias included) is lowered op by op there, with no fused Attention."""
    by_path = {m.path: m for m in modules}
    reasons: dict[str, list[str]] = {}
    for path in unclaimed:
        module = by_path.get(path)
        found = [d.reason for d in module.declines if d.pattern == "attention"] if module else []
        reasons.setdefault(found[0] if found else "it was not captured", []).append(path)
    return [
        Gap(
            "attention",
            "op-by-op",
            paths,
            f"attention in {describe(paths)} is lowered op by op (no fused Attention) because "
            f"{reason}",
        )
        for reason, paths in reasons.items()
    ]
