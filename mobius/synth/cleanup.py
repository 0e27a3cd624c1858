"""Graph tidying after emission: shared subexpressions merged, constants lifted, dead nodes removed.

Nothing here reads weight data: the passes look at node attributes and small Constant values only.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes import common


def tidy(model: ir.Model) -> ir.Model:
    """Run the cleanup passes in place and return the model."""
    passes = ir.passes.Sequential(
        common.IdentityEliminationPass(),
        common.CommonSubexpressionEliminationPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.RemoveUnusedNodesPass(),
    )
    passes(model)
    return model
