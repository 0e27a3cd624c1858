"""What a trace holds for: named dimensions the export fixed to constants, or only up to a bound
(a Python branch on a length), and whether the logits have one row per new token."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class LengthBound:
    """A named dimension the trace holds for only up to ``upper`` (a Python branch on a length),
    or not at ``ruled_out`` (an equality about the length, a loop over chunks)."""

    input: str
    axis: int
    lower: int = 0
    upper: int | None = None
    ruled_out: int | None = None

    def __str__(self) -> str:
        if self.upper is not None:
            return f"{self.lower} <= {self.input}[{self.axis}] <= {self.upper}"
        return f"{self.input}[{self.axis}] != {self.ruled_out}"


def length_bounds(
    program: torch.export.ExportedProgram, specs: list[TensorSpec], limit: int
) -> list[LengthBound]:
    """Each named dimension the trace holds only up to a bound below ``limit``, or not at some
    size up to it."""
    found, seen = [], set()
    for spec, node in zip(specs, user_inputs(program), strict=True):
        for axis, dim in enumerate(spec.dims):
            size = node.meta["val"].shape[axis]
            if not isinstance(dim, str) or not isinstance(size, torch.SymInt):
                continue
            if size.node.expr in seen:  # the mask's length is the ids': one bound says both
                continue
            seen.add(size.node.expr)
            ranges = program.range_constraints.get(size.node.expr)
            if ranges is None:
                continue
            if ranges.upper.is_Integer and int(ranges.upper) < limit:  # int_oo is not an Integer
                found.append(LengthBound(spec.name, axis, int(ranges.lower), int(ranges.upper)))
            elif (ruled_out := size_an_equality_rules_out(size, limit)) is not None:
                found.append(LengthBound(spec.name, axis, ruled_out=ruled_out))
    return found


def bounded_dims(
    program: torch.export.ExportedProgram, specs: list[TensorSpec], limit: int
) -> list[str]:
    """``lower <= input[axis] <= upper`` for each named dimension the trace holds only up to a
    bound below ``limit`` (``input[axis] != size`` for an equality that fails at a size)."""
    return [str(bound) for bound in length_bounds(program, specs, limit)]


def guard_lengths(
    inputs: dict[str, torch.Tensor], outputs: tuple[torch.Tensor, ...], bounds: list[LengthBound]
) -> tuple[torch.Tensor, ...]:
    """``outputs`` with a runtime check that every bounded length is within its bound: positions
    ``0..length-1`` gather from a table of ``upper`` zeros, which fails (ONNX ``Gather`` index out
    of range) for a longer input instead of computing the traced branch for it. The zero sum
    is added to the first floating output so that the check stays in the graph."""
    first = next((i for i, out in enumerate(outputs) if out.is_floating_point()), None)
    if first is None or not bounds:
        return outputs
    check = outputs[first].new_zeros(())
    for bound in bounds:
        length = inputs[bound.input].shape[bound.axis]
        positions = torch.arange(length, device=check.device)
        check = check + outputs[first].new_zeros(bound.upper)[positions].sum()
    return (*outputs[:first], outputs[first] + check, *outputs[first + 1 :])


def size_an_equality_rules_out(size: torch.SymInt, limit: int) -> int | None:
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
