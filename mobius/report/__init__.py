"""``mobius explain``: what every module of a model becomes, and what blocks the rest.

The report sits above ``synth``: ``explain`` traces and analyses through it, when called (importing
this package does not import it). Its data (``model.py``) is built from ``mobius.findings``, and
its renderings (``text.py``, ``html.py``) and checks (``schema.py``) read that data alone; they
may import ``mobius.findings`` and ``mobius.fallbacks``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mobius.report import html, text
from mobius.report.model import SCHEMA_VERSION, Report

__all__ = ["SCHEMA_VERSION", "ExplainReport", "explain"]


@dataclass
class ExplainReport(Report):
    """The explain report (``model.Report``: plain data and its JSON) with its two renderings."""

    def render_text(self, color: bool = False) -> str:
        return text.render(self, color=color)

    def render_html(self) -> str:
        return html.render(self)


def explain(
    src: str | os.PathLike, *, task: str | None = None, trust_remote_code: bool = False
) -> ExplainReport:
    """Trace ``src`` on the meta device (config only, no weights) and report on every module."""
    import torch

    from mobius import failures
    from mobius.synth.analysis import analyze, analyze_graphs
    from mobius.synth.graphs import PreparedGraphs
    from mobius.synth.prepare import prepare

    prepared = prepare(
        src, dtype=torch.float32, task=task, weights=False, trust_remote_code=trust_remote_code
    )
    with failures.phase(f"matching patterns in {prepared.arch.model_type}"):
        # an encoder-decoder: one report, each graph's modules under the graph's name
        analysis = (
            analyze_graphs(prepared) if isinstance(prepared, PreparedGraphs) else analyze(prepared)
        )
        return ExplainReport.from_analysis(analysis, source=str(src))
