"""UniDiffuser's caption decoder: GPT-2's KV cache off for the trace.

``UniDiffuserTextDecoder`` builds its GPT-2 from a ``GPT2Config`` whose ``use_cache`` defaults
to True, and its ``forward`` passes no ``use_cache``: every call would build a ``DynamicCache``
of each layer's keys and values and return it in the output dataclass. Its pipeline never reads
it (``generate_beam`` re-runs the whole prefix and caption each step, with no cache), and a graph
of the generic contract has tensors only as outputs; the cache off changes no logit.
"""

from __future__ import annotations

import torch


def no_kv_cache(module: torch.nn.Module) -> None:
    module.transformer.config.use_cache = False
