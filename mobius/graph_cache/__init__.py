"""The graph cache: a build's graphs, kept before their weights, for builds of the same shape.

``key`` says what a build's graphs depend on; ``store`` keeps entries on disk; ``evict`` keeps
them under a size cap, least recently used out first; ``recipe`` keeps
the weight transforms apart from the checkpoint they read; ``warm`` finds and keeps builds;
``cli`` is ``mobius cache list|clear``; ``apply`` is ``apply_weights``, a built package's graphs
with another checkpoint's weights. See docs/design/graph-cache.md.

Sits beside the build: imports ``mobius.sources``, ``mobius.output``, ``mobius.quant``,
``mobius.errors`` and ``mobius.failures`` (and reads mobius's version from the loaded package);
``mobius.convert`` gives each package it builds ``apply.apply_weights`` (or, built without
weights, an ``apply.GraphOnly`` holding how to emit the kept trace) as its ``weights_applier``,
which ``ModelPackage.apply_weights`` calls: nothing under ``mobius.output`` imports the cache.
"""

from __future__ import annotations

from mobius.graph_cache.apply import apply_weights
from mobius.graph_cache.store import cache_root

__all__ = ["apply_weights", "cache_root"]
