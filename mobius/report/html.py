"""One self-contained HTML page: summary, next steps, and the collapsible, colour-coded module tree.

No external resources: styles and the two expand/collapse buttons' script are inline.
"""

from __future__ import annotations

from html import escape

from mobius.report.grouping import Group, build_tree, group
from mobius.report.model import Report
from mobius.report.text import VERDICT_TEXT, cache_text, format_components, format_ops, human

OPEN_DEPTH = 3  # levels of the tree shown expanded; blocked subtrees are always expanded

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}
h1{font-size:1.3em;margin:0 0 .3em} h2{font-size:1.1em;margin:1.2em 0 .4em}
code,.ops{font-family:ui-monospace,monospace;font-size:12.5px}
table{border-collapse:collapse} td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
.badge{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;color:#fff}
.badge.s-component{background:#2e7d32}
.badge.s-lowered{background:#1565c0}
.badge.s-blocked{background:#c62828}
.badge.s-empty{background:#9e9e9e}
.v-full{background:#2e7d32}.v-fallback{background:#ef6c00}.v-blocked{background:#c62828}
.tree,.tree details>div{margin-left:1.2em}
.node{padding:1px 0;border-left:3px solid transparent;padding-left:4px}
.node.s-component{border-color:#2e7d32}.node.s-lowered{border-color:#1565c0}
.node.s-blocked{border-color:#c62828;background:#fdecea}.node.s-empty{border-color:#ddd}
summary{cursor:pointer} .cls{color:#555} .params{color:#777;font-size:12px}
.decline{color:#8d5a00;margin-left:1.6em} .inner-blocked{color:#c62828;font-size:12px}
"""

SCRIPT = """
function setAll(open){document.querySelectorAll('details').forEach(d=>d.open=open)}
"""


def render(report: Report) -> str:
    """The whole page as a string."""
    s = report.summary
    root = group(build_tree(report.modules))
    title = f"mobius explain: {report.model_type}"
    body = [
        f"<h1>{escape(title)} <span class='badge v-{s.verdict}'>"
        f"{escape(VERDICT_TEXT[s.verdict])} (exit {s.exit_code})</span></h1>",
        f"<div>task <code>{escape(report.task)}</code> · source <code>{escape(report.source)}"
        f"</code> · schema version {report.schema_version}</div>",
        "<h2>Summary</h2>",
        _summary_table(report),
        "<h2>Next steps</h2>",
        _next_steps(report),
        "<h2>Modules</h2>",
        "<div><button onclick='setAll(true)'>expand all</button> "
        "<button onclick='setAll(false)'>collapse all</button> "
        + " ".join(f"<span class='badge s-{st}'>{st}</span>" for st in _LEGEND)
        + "</div>",
        "<div class='tree'>",
        _group(root, 0),
        "</div>",
    ]
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><style>{STYLE}</style><script>{SCRIPT}</script>"
        "</head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


_LEGEND = ("component", "lowered", "blocked", "empty")


def _summary_table(report: Report) -> str:
    s = report.summary
    cache = cache_text(s)
    unsupported = "".join(
        f"<div><code>{escape(op)}</code> in {len(mods)} modules: "
        f"{escape(', '.join(mods[:6]))}{' …' if len(mods) > 6 else ''}</div>"
        for op, mods in s.unsupported_ops.items()
    )
    rows = [
        ("ops traced", f"{s.nodes:,}"),
        ("in components", f"{s.component_nodes:,} ({s.node_coverage:.1%})"),
        ("lowered op by op", f"{s.lowered_nodes:,}"),
        ("blocked", f"{s.blocked_nodes:,}"),
        ("parameters", human(s.parameters)),
        ("read only by components", f"{s.parameter_coverage:.1%}"),
        ("KV cache", cache),
        ("unsupported ops", unsupported or "none"),
    ]
    cells = "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table class='summary'>{cells}</table>"


def _next_steps(report: Report) -> str:
    gaps = report.summary.gaps
    if not gaps:
        return "<p>None: the model converts fully.</p>"
    items = "".join(f"<li data-kind='{escape(g.kind)}'>{escape(g.next_step)}</li>" for g in gaps)
    return f"<ol class='gaps'>{items}</ol>"


def _blocked_below(g: Group) -> bool:
    return any(c.module.status == "blocked" or _blocked_below(c) for c in g.children)


def _head(g: Group) -> str:
    m = g.module
    name = escape(g.label or m.cls)
    count = f" ×{len(g.members)}" if g.indexed and len(g.members) > 1 else ""
    parts = []
    if m.blocked_ops:
        parts.append("no lowering: " + escape(format_ops(m.blocked_ops, limit=99, short=False)))
    if m.components:
        parts.append(escape(format_components(m.components)))
    if m.lowered_ops:
        parts.append("lowered: " + escape(format_ops(m.lowered_ops, limit=8)))
    params = f" <span class='params'>{human(m.parameters)} params</span>" if m.parameters else ""
    inner = " <span class='inner-blocked'>(blocked inside)</span>" if _blocked_below(g) else ""
    cls = f" <span class='cls'>{escape(m.cls)}</span>" if g.label else ""
    paths = escape("\n".join(p or "<model>" for p in g.paths[:64]))
    return (
        f"<span class='badge s-{m.status}'>{m.status}</span> <b title='{paths}'>{name}</b>{count}"
        f"{cls} <span class='ops'>{' · '.join(parts)}</span>"
        f"{params}{inner}"
    )


def _group(g: Group, depth: int) -> str:
    m = g.module
    declines = "".join(
        f"<div class='decline'>declined by <b>{escape(d.pattern)}</b>: {escape(d.reason)}</div>"
        for d in m.declines
    )
    attrs = f"class='node s-{m.status}' data-status='{m.status}' data-path='{escape(m.path)}'"
    if not g.children:
        return f"<div {attrs}>{_head(g)}{declines}</div>"
    is_open = " open" if depth < OPEN_DEPTH or _blocked_below(g) else ""
    kids = "".join(_group(c, depth + 1) for c in g.children)
    return (
        f"<details {attrs}{is_open}><summary>{_head(g)}</summary>{declines}"
        f"<div>{kids}</div></details>"
    )
