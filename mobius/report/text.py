"""Terminal rendering: the grouped module tree, then the summary and the next steps."""

from __future__ import annotations

from mobius.report.grouping import Group, build_tree, group
from mobius.report.model import Component, ModuleReport, Report, Summary

COLORS = {"component": "32", "lowered": "36", "blocked": "1;31", "empty": "2", "decline": "33"}
MAX_OPS = 4
VERDICT_TEXT = {
    "full": "converts fully",
    "fallback": "converts, but without a KV cache (fallback trace)",
    "blocked": "blocked: some ops have no lowering",
}


def short_op(op: str) -> str:
    """``aten.linear.default`` -> ``linear``; other namespaces keep their prefix."""
    parts = op.split(".")
    if parts[0] == "aten" and len(parts) >= 2:
        return parts[1]
    return op


def human(n: float) -> str:
    """``8030261248`` -> ``8.03 B``."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return str(int(n))


def format_value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def format_components(components: list[Component]) -> str:
    """Identical components (apart from the layer index) once, with a count."""
    seen: dict[str, int] = {}
    for c in components:
        attrs = []
        for k, v in c.attributes.items():
            if k == "layer" or v is None or v is False:
                continue
            attrs.append(k if v is True else f"{k}={format_value(v)}")
        text = f"{c.component}({', '.join(attrs)})"
        seen[text] = seen.get(text, 0) + 1
    return " + ".join(t if n == 1 else f"{n}× {t}" for t, n in seen.items())


def format_ops(ops: dict[str, int], limit: int = MAX_OPS, short: bool = True) -> str:
    items = [
        f"{short_op(op) if short else op}" + (f"×{n}" if n > 1 else "") for op, n in ops.items()
    ]
    more = f" +{len(items) - limit} more" if len(items) > limit else ""
    return " ".join(items[:limit]) + more


def result(m: ModuleReport) -> str:
    """What became of the module's own ops, in one phrase."""
    parts = []
    if m.blocked_ops:
        parts.append("BLOCKED, no lowering: " + format_ops(m.blocked_ops, limit=99, short=False))
    if m.components:
        parts.append(format_components(m.components))
    if m.lowered_ops:
        parts.append(
            ("lowered: " if not m.components else "+ lowered: ") + format_ops(m.lowered_ops)
        )
    return "; ".join(parts)


def _paint(text: str, status: str, color: bool) -> str:
    return f"\033[{COLORS[status]}m{text}\033[0m" if color else text


def tree_lines(report: Report, color: bool = False) -> list[str]:
    root = group(build_tree(report.modules))
    lines = [_line(root, "", color)]
    _children(root, "", lines, color)
    return lines


def _line(g: Group, prefix: str, color: bool) -> str:
    m = g.module
    name = f"{g.label}: {m.cls}" if g.label else m.cls
    outcome = result(m)
    arrow = f" → {_paint(outcome, m.status, color)}" if outcome else ""
    return f"{prefix}{name}{arrow}"


def _children(g: Group, indent: str, lines: list[str], color: bool) -> None:
    declines = [f"declined by {d.pattern}: {d.reason}" for d in g.module.declines]
    items: list[Group | str] = [*declines, *g.children]
    for i, item in enumerate(items):
        last = i == len(items) - 1
        branch, carry = ("└─ ", "   ") if last else ("├─ ", "│  ")
        if isinstance(item, str):
            lines.append(f"{indent}{branch}{_paint(item, 'decline', color)}")
            continue
        lines.append(_line(item, indent + branch, color))
        _children(item, indent + carry, lines, color)


def cache_text(s: Summary) -> str:
    if s.kv_cache and any(g.kind == "cache" and g.subject == "traced" for g in s.gaps):
        return f"yes, {s.cache_layers} layers, carried through the trace (lowered op by op)"
    if s.kv_cache:
        return f"yes, {s.cache_layers} attention layers"
    if not s.cache_supported:
        return "not part of this task"
    model_wide = [g for g in s.gaps if g.kind == "cache" and g.subject == "model"]
    if model_wide:
        return model_wide[0].next_step.replace("no KV cache: ", "no: ", 1)
    if any(g.kind == "cache" for g in s.gaps):
        return "no: attention was not captured, so the model is traced without a cache"
    return "none needed: the model has no captured attention"


def summary_lines(report: Report) -> list[str]:
    s: Summary = report.summary
    cache = cache_text(s)
    unsupported = (
        "; ".join(f"{op} (in {len(mods)} modules)" for op, mods in s.unsupported_ops.items())
        or "none"
    )
    lines = [
        f"ops         {s.nodes:,} traced: {s.node_coverage:.1%} in components, "
        f"{s.lowered_nodes / max(s.nodes, 1):.1%} lowered op by op, {s.blocked_nodes} blocked",
        f"parameters  {human(s.parameters)}: {s.parameter_coverage:.1%} read only by components, "
        "the rest by lowered ops",
        f"KV cache    {cache}",
        f"unsupported {unsupported}",
    ]
    steps = [f"  - {gap.next_step}" for gap in s.gaps]
    lines += ["next steps" + ("" if steps else "  none"), *steps]
    lines.append(f"verdict     {VERDICT_TEXT[s.verdict]} (exit {s.exit_code})")
    return lines


def render(report: Report, color: bool = False) -> str:
    header = f"{report.model_type} · {report.task} · {report.source}"
    return "\n".join([header, "", *tree_lines(report, color), "", *summary_lines(report)]) + "\n"
