"""The graph cache: a build's graphs, kept before their weights, for builds of the same shape.

``key`` says what a build's graphs depend on; ``store`` keeps entries on disk; ``recipe`` keeps
the weight transforms apart from the checkpoint they read; ``warm`` finds and keeps builds;
``cli`` is ``mobius cache list|clear``; ``apply`` is ``apply_weights``, a built package's graphs
with another checkpoint's weights. See docs/design/graph-cache.md.

Sits above the build: may import ``mobius.sources``, ``mobius.output``, ``mobius.quant``,
``mobius.errors``, ``mobius.failures`` and ``mobius`` itself (its version); only ``mobius.cli``
and ``mobius.build_cli`` import it, and nothing under ``mobius.output`` does (``ModelPackage``
knows nothing of it).
"""

from __future__ import annotations

from mobius.graph_cache.apply import apply_weights
from mobius.graph_cache.store import cache_root

__all__ = ["apply_weights", "cache_root"]
