"""Guards a trace holds for that relate two or more input dimensions, and those the contract does
not declare.

torch.export records a guard for every Python decision on sizes. ``trace_bounds`` reads the ones on
a single dimension (range constraints, equalities on one symbol); a guard on two or more (Python's
``max(frames, rows, cols)`` picks frames at trace and records ``rows <= frames``) lives only in the
shape environment's guards, or as a runtime assertion (``_assert_scalar``), and neither the
program's input checks nor the ONNX graph keep it. Outside it the graph computes the traced
branch: a shape error at run time, or a silently wrong result.

A relation the contract makes itself (``tasks.related_sizes``: a joint sequence is the prompt
then the patches, frames folded into the batch number batch times frames) is no restriction. So a
relation counts here only when it fails at some sizes the contract allows: sizes drawn per axis,
related as the contract relates them, within each axis's own range and single-axis guards
(``undeclared_relations``). Axes the contract fixes are constants: they relate nothing.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from mobius.diffusers import tasks as dt
from mobius.synth.trace_bounds import _LAYOUT_QUERIES, user_inputs
from mobius.tasks.base import BATCH, SEQUENCE

# the sizes each axis is drawn from (a contract's derived axes follow from these); heights and
# widths are multiples of 8, as pipelines give latents (trace.LATENT_MULTIPLE)
CANDIDATES = {
    BATCH: (1, 2, 3, 4),
    SEQUENCE: (2, 3, 5, 7, 8, 16, 33, 77),
    dt.HEIGHT: (8, 16, 24, 32, 40, 48, 64, 96, 128),
    dt.WIDTH: (8, 16, 24, 32, 40, 48, 64, 96, 128),
    dt.IMAGE_SEQUENCE: (4, 9, 10, 12, 16, 64, 100),
    dt.FRAMES: (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17, 21),
    dt.LENGTH: (8, 16, 32, 40, 64, 96, 128),
    dt.NOISE_LEVELS: (1, 2, 3, 4, 5),
    dt.TEXT_LAYERS: (2, 3, 5, 6, 9),
    dt.INPUT_HEIGHT: (2, 4, 6, 8, 16),
    dt.INPUT_WIDTH: (2, 4, 6, 8, 16),
}
OTHER_AXIS = (2, 3, 4, 5, 6, 8, 9, 16)  # an axis the table above does not name
DRAWS = 600
# Bounds the trace records from branches that change no value: diffusers' upsampler makes its
# input contiguous from a batch of 64 on (``shape[0] >= 64``), a memory-layout choice.
NEUTRAL_BATCH_BOUND = 63


@dataclass(frozen=True)
class ShapeRelation:
    """A guard relating input dimensions, over symbols named ``input[axis]`` (``text``), with a
    size set the contract allows where it fails (``example``) and the model's line that made it
    (``where``). Checked in the graph like a ``LengthBound`` (``violation``)."""

    text: str
    expr: Any = field(compare=False, hash=False)  # sympy, over Symbol("input[axis]")
    axes: tuple[tuple[str, int], ...] = field(compare=False)
    example: str = field(compare=False, default="")
    where: str = field(compare=False, default="")

    def __str__(self) -> str:
        return self.text

    def violation(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """0 where the relation holds for ``inputs``' sizes, 1 where it does not (int64)."""
        values = {}
        for name, axis in self.axes:
            x = inputs[name]
            values[axis_symbol(name, axis)] = x.new_ones((), dtype=torch.int64) * x.shape[axis]
        holds = _tensor_value(self.expr, values)
        return (~holds).to(torch.int64)


def axis_symbol(name: str, axis: int) -> sympy.Symbol:
    return sympy.Symbol(f"{name}[{axis}]", integer=True, positive=True)


def relations(program: torch.export.ExportedProgram, specs: list) -> list[tuple[Any, str]]:
    """Every guard and runtime assertion of ``program`` (layout queries left out) over the input
    dimensions, rewritten over ``input[axis]`` symbols, with where each was made: those on one
    dimension and those relating several alike. An input axis the trace made an expression of
    others (a size it unified with another, or derived) is the relation ``axis == expression``."""
    names, equal_axes = _axis_names(program, specs)
    found: list[tuple[Any, str]] = list(equal_axes)
    shape_env = _shape_env(program)
    if shape_env is None:
        return found
    exprs: list[tuple[Any, str]] = []
    for guard in shape_env.guards:
        if not _layout_query(str(guard.sloc)):
            exprs.append((guard.expr, guard.sloc.maybe_user_loc or str(guard.sloc)))
    for asserts in shape_env.deferred_runtime_asserts.values():
        exprs += [(ra.expr, ra.msg) for ra in asserts]
    for node in program.graph.nodes:
        if node.target is torch.ops.aten._assert_scalar.default:
            value = getattr(node.args[0], "meta", {}).get("val")
            if isinstance(value, torch.SymBool):
                exprs.append((value.node.expr, str(node.args[1]) if len(node.args) > 1 else ""))
    seen = set()
    for expr, where in exprs:
        if not expr.free_symbols or not expr.free_symbols <= names.keys():
            continue  # a constant, or a data-dependent size (no input's)
        named = expr.xreplace(names)
        if named in seen or named in (sympy.true, sympy.false):
            continue
        seen.add(named)
        found.append((named, where.strip("() ")))
    return found


def _layout_query(site: str) -> bool:
    """A guard torch made to pick a memory layout (``trace_bounds._LAYOUT_QUERIES``; torch's
    stride and contiguity functions: ``ge`` inside ``should_swap``, which LTX-Video's VAE encoder
    meets, ``is_channels_last_contiguous_2d``, T2IAdapter's light adapter)."""
    return site.endswith(_LAYOUT_QUERIES) or bool(_LAYOUT_HELPERS.search(site))


_LAYOUT_HELPERS = re.compile(
    r"_prims_common/\S+ in (ge|should_swap|is_\w*contiguous\w*|is_non_overlapping\w*"
    r"|\w*strides?\w*|\w*memory_format\w*)\)$"
)


def folded_batch_layout(relation: ShapeRelation, specs: list) -> bool:
    """diffusers' ``Upsample2D`` makes its input contiguous from a batch of 64 on (a layout
    choice, ``NEUTRAL_BATCH_BOUND``); in a video UNet that folds frames into the batch the
    bound is on batch times frames (``sample[0]*sample[2] < 64``), and changes no value either."""

    expr = relation.expr
    if "upsampling.py" not in relation.where or not isinstance(expr, sympy.StrictLessThan):
        return False
    batch = {axis_symbol(s.name, a) for s in specs for a, d in enumerate(s.dims) if d == BATCH}
    return expr.rhs == NEUTRAL_BATCH_BOUND + 1 and bool(expr.lhs.free_symbols & batch)


def undeclared_relations(
    program: torch.export.ExportedProgram, specs: list, cfg: Any, draws: int = DRAWS
) -> list[ShapeRelation]:
    """The relations of ``program`` between two or more input dimensions that fail at some sizes
    the contract allows: each axis drawn from ``CANDIDATES`` (``draws`` size sets, seeded), the
    contract's derived axes computed from them (``tasks.related_sizes``), kept where every
    single-dimension guard and range holds."""
    found = relations(program, specs)
    single = [e for e, _ in found if len(e.free_symbols) == 1]
    multi = [(e, w) for e, w in found if len(e.free_symbols) >= 2]
    if not multi:
        return []
    axes = {
        axis_symbol(s.name, a): d for s in specs for a, d in enumerate(s.dims) if isinstance(d, str)
    }
    ranges = _ranges(program, specs)
    # distinct size sets only: a graph has few axes, and sympy evaluates slowly (~0.1 ms a guard)
    points = list({tuple(p.items()): p for p in _size_sets(axes, cfg, draws)}.values())
    allowed: dict[int, bool] = {}  # the single-axis guards, checked only where a relation fails

    def fails_at(expr: Any, index: int) -> bool:
        if _holds(expr, points[index]):
            return False
        if index not in allowed:
            allowed[index] = _allowed(points[index], single, ranges)
        return allowed[index]

    out = []
    for expr, where in multi:
        failing = next((points[i] for i in range(len(points)) if fails_at(expr, i)), None)
        if failing is None:
            continue
        used = sorted(expr.free_symbols, key=str)
        example = ", ".join(f"{s}={failing[s]}" for s in used)
        text = _readable(expr)
        pairs = tuple(_parse(s) for s in used)
        relation = ShapeRelation(text, expr, pairs, example, where)
        if not folded_batch_layout(relation, specs):
            out.append(relation)
    return out


_NAME = re.compile(r"^(.*)\[(\d+)\]$")


def _parse(symbol: sympy.Symbol) -> tuple[str, int]:
    match = _NAME.match(str(symbol))
    return match[1], int(match[2])


def _readable(expr: Any) -> str:
    return re.sub(r"\(\((.+?)\)\)", r"(\1)", str(expr))


def _shape_env(program: torch.export.ExportedProgram) -> Any:
    for node in user_inputs(program):
        val = node.meta.get("val")
        for size in getattr(val, "shape", ()):
            if isinstance(size, torch.SymInt):
                return size.node.shape_env
    return None


def _axis_names(
    program: torch.export.ExportedProgram, specs: list
) -> tuple[dict[Any, sympy.Symbol], list[tuple[Any, str]]]:
    """Each shape symbol -> the ``input[axis]`` symbol of the first named axis that is it; and
    ``axis == expression`` for each named axis the trace made an expression of other axes, or
    the same symbol as an earlier axis."""
    names: dict[Any, sympy.Symbol] = {}
    later: list[tuple[sympy.Symbol, Any]] = []
    for spec, node in zip(specs, user_inputs(program), strict=True):
        for axis, dim in enumerate(spec.dims):
            size = node.meta["val"].shape[axis]
            if not isinstance(dim, str) or not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            if expr.is_Symbol and expr not in names:
                names[expr] = axis_symbol(spec.name, axis)
            elif expr.free_symbols:
                later.append((axis_symbol(spec.name, axis), expr))
    equal = []
    for symbol, expr in later:
        unknown = expr.free_symbols - names.keys()
        if len(unknown) == 1:  # an axis the trace made ``2 * s`` of a fresh s: solve for s
            (fresh,) = unknown
            solved = sympy.solve(sympy.Eq(expr, symbol), fresh)
            if len(solved) == 1:
                names[fresh] = solved[0]
                continue
        if not unknown:
            equal.append((sympy.Eq(symbol, expr.xreplace(names)), "a size the trace unified"))
    return names, equal


def _ranges(program: torch.export.ExportedProgram, specs: list) -> dict[sympy.Symbol, Any]:
    out = {}
    for spec, node in zip(specs, user_inputs(program), strict=True):
        for axis, dim in enumerate(spec.dims):
            size = node.meta["val"].shape[axis]
            if isinstance(dim, str) and isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                out[axis_symbol(spec.name, axis)] = program.range_constraints.get(size.node.expr)
    return out


def _size_sets(axes: dict[sympy.Symbol, str], cfg: Any, draws: int) -> list[dict]:
    """``draws`` size sets (the trace's and the parity runs' first), each axis symbol -> size."""
    from mobius.verification.diffusers_feeds import SIZE_SETS

    rng = random.Random(0)
    dims = set(axes.values())
    fixed_frames = cfg.get("video_length") if hasattr(cfg, "get") else None
    bases = [dt.EXAMPLE_SIZES, *SIZE_SETS]
    for _ in range(draws):
        bases.append(
            {d: rng.choice(CANDIDATES.get(d, OTHER_AXIS)) for d in dims | CANDIDATES.keys()}
        )
    out = []
    for base in bases:
        base = {
            d: base.get(d, rng.choice(CANDIDATES.get(d, OTHER_AXIS))) for d in dims | base.keys()
        }
        if fixed_frames:
            base[dt.FRAMES] = fixed_frames
        sizes = dt.related_sizes(cfg, base)
        out.append({s: sizes.get(d, 5) for s, d in axes.items()})
    return out


def _allowed(point: dict, single: list, ranges: dict) -> bool:
    for symbol, bounds in ranges.items():
        value = point.get(symbol)
        if bounds is not None and value is not None:
            if value < int(bounds.lower) or (bounds.upper.is_Integer and value > int(bounds.upper)):
                return False
    return all(_holds(e, point) for e in single)


def _holds(expr: Any, point: dict) -> bool:
    """The guard at ``point``; one that cannot be evaluated there (a division's domain) holds."""
    try:
        return bool(expr.xreplace({s: point[s] for s in expr.free_symbols}))
    except (TypeError, ValueError, AssertionError, ZeroDivisionError, KeyError):
        return True


_COMPARE = {
    "Equality": lambda a, b: a == b,
    "Unequality": lambda a, b: a != b,
    "LessThan": lambda a, b: a <= b,
    "StrictLessThan": lambda a, b: a < b,
    "GreaterThan": lambda a, b: a >= b,
    "StrictGreaterThan": lambda a, b: a > b,
}


def _tensor_value(expr: Any, values: dict) -> Any:
    """``expr`` (sympy, over ``values``' symbols) computed with tensor operations, so that a
    check of it stays in the graph instead of becoming a guard."""
    kind = type(expr).__name__
    args = [_tensor_value(a, values) for a in expr.args]
    if expr.is_Symbol:
        return values[expr]
    if expr.is_Integer or expr is sympy.true or expr is sympy.false:
        return int(expr) if expr.is_Integer else bool(expr)
    one = next(iter(values.values()))
    tensors = [a if isinstance(a, torch.Tensor) else one.new_tensor(a) for a in args]
    if kind in _COMPARE:
        return _COMPARE[kind](*tensors)
    if kind == "Add":
        return sum(tensors[1:], tensors[0])
    if kind == "Mul":
        product = tensors[0]
        for t in tensors[1:]:
            product = product * t
        return product
    if kind == "Pow" and expr.args[1].is_Integer and int(expr.args[1]) >= 0:
        return tensors[0] ** int(expr.args[1])
    if kind == "FloorDiv":
        return torch.div(tensors[0], tensors[1], rounding_mode="floor")
    if kind in ("Mod", "PythonMod"):
        return torch.remainder(tensors[0], tensors[1])
    if kind in ("Max", "Min"):
        pick = torch.maximum if kind == "Max" else torch.minimum
        out = tensors[0]
        for t in tensors[1:]:
            out = pick(out, t)
        return out
    if kind in ("And", "Or"):
        out = tensors[0]
        for t in tensors[1:]:
            out = (out & t) if kind == "And" else (out | t)
        return out
    if kind == "Not":
        return ~tensors[0]
    raise NotImplementedError(f"no tensor form of {kind} in {expr}")


def checkable(relation: ShapeRelation) -> bool:
    """The relation can be computed in the graph (``_tensor_value`` knows its functions)."""
    values = {axis_symbol(n, a): torch.ones((), dtype=torch.int64) for n, a in relation.axes}
    try:
        _tensor_value(relation.expr, values)
    except NotImplementedError:
        return False
    return True
