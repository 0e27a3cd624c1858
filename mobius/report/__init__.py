"""``mobius explain``: what every module of a model becomes, and what blocks the rest.

Importing this package does not import the synthesis driver; ``explain`` reaches it when called.
"""

from __future__ import annotations

import os

from mobius.report.model import SCHEMA_VERSION, ExplainReport

__all__ = ["SCHEMA_VERSION", "ExplainReport", "explain"]


def explain(
    src: str | os.PathLike, *, task: str | None = None, trust_remote_code: bool = False
) -> ExplainReport:
    """Trace ``src`` on the meta device (config only, no weights) and report on every module."""
    import torch

    from mobius import failures
    from mobius.synth.analysis import analyze
    from mobius.synth.graphs import PreparedGraphs, analyze_graphs
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
