"""Canonical-subgraph patterns (one file each) that claim FX regions and emit components.

``match_all`` runs every pattern over the traced graph: region patterns look at the nodes of one
module instance, anchored patterns at a subgraph ending in one node. The result maps each claimed
node to its claim, and lists the declines with their reasons (for the explain report).

Patterns emit ``mobius.components``; they may import those, ``lowering``, the contracts' names
(``mobius.tasks``), ``mobius.sources`` and ``mobius.failures``; never ``synth``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.fx

from patterns import (
    attention_block,
    bidirectional_sdpa,
    experts,  # noqa: F401  (registers the emitter of unclaimed experts calls)
    gelu,
    group_norm,
    moe,
    rms_norm,
    rotary,
    sdpa,
    timestep_embedding,
)
from patterns.base import Claim, Decline, MatchContext, Region

REGION_PATTERNS: list[Callable[[Region], Claim | Decline | None]] = [
    rms_norm.match,
    moe.match_region,
]
# attention_block first: it claims the rotary nodes of the blocks it packs
ANCHOR_PATTERNS: list[Callable[[torch.fx.Node, MatchContext], Claim | Decline | None]] = [
    attention_block.match,
    moe.match,
    rotary.match,
    bidirectional_sdpa.match,  # before sdpa.py, which declines every non-causal call
    sdpa.match,
    gelu.match,
    group_norm.match,
    timestep_embedding.match,
]


def match_all(
    graph: torch.fx.Graph, regions: list[Region], context: MatchContext | None = None
) -> tuple[dict[torch.fx.Node, Claim], list[Claim], list[Decline]]:
    """Run the patterns; claims never overlap (first come, first kept)."""
    owner: dict[torch.fx.Node, Claim] = {}
    claims: list[Claim] = []
    declines: list[Decline] = []

    def consider(result: Claim | Decline | None) -> None:
        if result is None:
            return
        if isinstance(result, Decline):
            declines.append(result)
            return
        reason = result.check_closed()
        if reason is None and any(n in owner for n in result.nodes):
            reason = "overlaps a subgraph another pattern already claimed"
        if reason is not None:
            declines.append(Decline(result.pattern, result.module, reason))
            return
        claims.append(result)
        owner.update(dict.fromkeys(result.nodes, result))

    for region in regions:
        for pattern in REGION_PATTERNS:
            consider(pattern(region))
    for pattern in ANCHOR_PATTERNS:  # pattern by pattern: earlier patterns take precedence
        for node in graph.nodes:
            if node.op == "call_function" and node not in owner:
                consider(pattern(node, context or MatchContext()))
    return owner, claims, declines
