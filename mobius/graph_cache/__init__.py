"""The graph cache: a build's graphs, kept before their weights, for builds of the same shape.

``key`` says what a build's graphs depend on; ``store`` keeps entries on disk; ``recipe`` keeps
the weight transforms apart from the checkpoint they read; ``warm`` finds and keeps builds;
``cli`` is ``mobius cache list|clear``. See docs/design/graph-cache.md.
"""

from __future__ import annotations

from mobius.graph_cache.store import cache_root

__all__ = ["cache_root"]
