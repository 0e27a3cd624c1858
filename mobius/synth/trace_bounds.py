"""What a trace holds for: named dimensions the export fixed to constants, or only up to a bound
(a Python branch on a length), and whether the logits have one row per new token."""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind

from mobius.config import ArchitectureConfig, position_limit
from mobius.tasks import TensorSpec
from mobius.tasks.base import SEQUENCE


def specialised_dims(program: torch.export.ExportedProgram, specs: list[TensorSpec]) -> list[str]:
    """``input[axis]=size`` for each named (dynamic) dimension the trace turned into a constant."""
    user = [node.meta["val"] for node in user_inputs(program)]
    return [
        f"{spec.name}[{axis}]={val.shape[axis]}"
        for spec, val in zip(specs, user, strict=True)
        for axis, dim in enumerate(spec.dims)
        if isinstance(dim, str) and is_constant(val.shape[axis])
    ]


def length_limit(config: ArchitectureConfig) -> int:
    """Bounds from here on are the model's own length limit (slicing its position table), not a
    branch; without a position limit in the config, 256 (chunked kernels branch below that)."""
    positions = position_limit(config.hf_config)
    return positions // 2 if positions is not None and positions > 1 else 256


def user_inputs(program: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    return [
        node
        for node, spec in zip(
            (n for n in program.graph.nodes if n.op == "placeholder"),
            program.graph_signature.input_specs,
            strict=True,
        )
        if spec.kind == InputKind.USER_INPUT
    ]


def bounded_dims(
    program: torch.export.ExportedProgram, specs: list[TensorSpec], limit: int
) -> list[str]:
    """``lower <= input[axis] <= upper`` for each named dimension the trace holds only up to a
    bound below ``limit``."""
    found = []
    for spec, node in zip(specs, user_inputs(program), strict=True):
        for axis, dim in enumerate(spec.dims):
            size = node.meta["val"].shape[axis]
            if not isinstance(dim, str) or not isinstance(size, torch.SymInt):
                continue
            ranges = program.range_constraints.get(size.node.expr)
            if ranges is None:
                continue
            if ranges.upper.is_Integer and int(ranges.upper) < limit:  # int_oo is not an Integer
                found.append(f"{int(ranges.lower)} <= {spec.name}[{axis}] <= {int(ranges.upper)}")
            elif (
                ruled_out := size_an_equality_rules_out(size, limit, spec.multiple_of)
            ) is not None:
                found.append(f"{spec.name}[{axis}] != {ruled_out}")
    return found


def size_an_equality_rules_out(size: torch.SymInt, limit: int, multiple_of: int = 1) -> int | None:
    """The smallest size up to ``limit`` for which an equality the trace assumed about this size
    alone fails. A Python loop over chunks (``range(length // chunk)``) fixes the chunk count so;
    inequalities are left alone, as stride and memory-format queries make many that change no
    value."""
    import sympy

    symbol = size.node.expr
    if not symbol.is_Symbol:
        return None
    equalities = [
        g.expr
        for g in size.node.shape_env.guards
        if isinstance(g.expr, sympy.Eq) and g.expr.free_symbols == {symbol}
    ]
    sizes = [*range(2, min(limit, 130)), *(2**k + d for k in range(8, 17) for d in (-1, 0, 1))]
    sizes = [v for v in sizes if v % multiple_of == 0]  # the sizes the input takes
    return next(
        (v for v in sizes if v <= limit and any(fails_at(e, symbol, v) for e in equalities)),
        None,
    )


def fails_at(equality, symbol, value: int) -> bool:
    """The equality is false at ``value``, a size the model accepts. A size that makes some
    floor division in it negative is not one: a convolution stack's output length (SEW's,
    conformer's feature encoder) is negative there and the model itself cannot run. torch's
    sympy functions may also assert their domain on such sizes; that says the same."""
    import sympy

    try:
        for sub in sympy.preorder_traversal(equality):
            if type(sub).__name__ in _DIVISIONS:
                at = sub.xreplace({symbol: value})
                if at.is_number and at < 0:
                    return False
        return equality.xreplace({symbol: value}) == sympy.false
    except (AssertionError, ValueError, TypeError, ZeroDivisionError):
        return False


_DIVISIONS = ("FloorDiv", "CleanDiv", "IntTrueDiv", "Mod", "PythonMod", "floor")


def one_row_per_new_token(program: torch.export.ExportedProgram, specs: list[TensorSpec]) -> bool:
    """The first output (the logits) is as long, on the sequence axis, as the first input."""
    first_input = user_inputs(program)[0].meta["val"]
    output = program.graph.output_node().args[0][0].meta.get("val")
    axis = specs[0].dims.index(SEQUENCE) if SEQUENCE in specs[0].dims else 1
    if output is None or output.dim() <= axis:
        return True
    return same_size(first_input.shape[axis], output.shape[axis])


def same_size(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    expr = [x.node.expr if isinstance(x, torch.SymInt) else x for x in (a, b)]
    return bool(expr[0] == expr[1])


def is_constant(size: int | torch.SymInt) -> bool:
    return not isinstance(size, torch.SymInt) or not size.node.expr.free_symbols
