"""What a trace holds for: named dimensions the export fixed to constants, or only up to a bound
(a Python branch on a length), and whether the logits have one row per new token."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.export.graph_signature import InputKind

from mobius.sources.config import ArchitectureConfig, position_limit
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
    """A named dimension the trace holds for only from ``lower`` up to ``upper`` (a Python branch
    on a length), or not at ``ruled_out`` (an equality about the length, a loop over chunks)."""

    input: str
    axis: int
    lower: int = 0
    upper: int | None = None
    ruled_out: int | None = None

    def violation(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """0 where the length of ``inputs`` is within the bounds, else not 0 (int64)."""
        x = inputs[self.input]
        length = x.new_ones((), dtype=torch.int64) * x.shape[self.axis]
        index = length.new_zeros(())
        if self.lower > 2:
            index = index + (length - self.lower).clamp(max=0)
        if self.upper is not None:
            index = index + (length - self.upper).clamp(min=0)
        return index

    def __str__(self) -> str:
        if self.ruled_out is not None:
            return f"{self.input}[{self.axis}] != {self.ruled_out}"
        upper = f" <= {self.upper}" if self.upper is not None else ""
        return f"{self.lower} <= {self.input}[{self.axis}]{upper}"


def length_bounds(
    program: torch.export.ExportedProgram,
    specs: list[TensorSpec],
    limit: int,
    lower_bounds: bool = True,
) -> list[LengthBound]:
    """Each named dimension the trace holds only up to a bound below ``limit``, or not at some
    size up to it; with ``lower_bounds``, sizes ruled out only below the traced one make a lower
    bound instead."""
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
            elif failing := sizes_an_equality_rules_out(size, limit, spec.multiple_of):
                traced = size.node.hint
                if lower_bounds and isinstance(traced, int) and max(failing) < traced:
                    # a branch for short inputs only (Funnel pools no further below 3 tokens):
                    # the trace holds from the next size up
                    found.append(LengthBound(spec.name, axis, lower=max(failing) + 1))
                else:
                    found.append(LengthBound(spec.name, axis, ruled_out=failing[0]))
    return found


def bounded_dims(
    program: torch.export.ExportedProgram, specs: list[TensorSpec], limit: int
) -> list[str]:
    """``lower <= input[axis] <= upper`` for each named dimension the trace holds only up to a
    bound below ``limit`` (``input[axis] != size`` for an equality that fails at a size)."""
    return [str(bound) for bound in length_bounds(program, specs, limit, lower_bounds=False)]


def guard_lengths(
    inputs: dict[str, torch.Tensor], outputs: tuple[torch.Tensor, ...], bounds: list[LengthBound]
) -> tuple[torch.Tensor, ...]:
    """``outputs`` with a runtime check that every bounded length is within its bounds: one zero
    is gathered at index ``2 * (min(length - lower, 0) + max(length - upper, 0))``, which is out
    of a one-element table's range (ONNX ``Gather`` fails) for a length outside them, instead of
    the traced branch computing something else for it. The zero is added to the first floating
    output so that the check stays in the graph. A lower bound of 2 is torch's own for a dynamic
    size (it specialises 0 and 1), not the model's, and is not checked."""
    first = next((i for i, out in enumerate(outputs) if out.is_floating_point()), None)
    if first is None or not bounds:
        return outputs
    table = outputs[first].new_zeros(1)
    check = table.sum()
    for bound in bounds:  # a LengthBound, or anything with ``violation`` (a shape relation)
        check = check + table[(2 * bound.violation(inputs)).view(1)].sum()
    return (*outputs[:first], outputs[first] + check, *outputs[first + 1 :])


def sizes_an_equality_rules_out(size: torch.SymInt, limit: int, multiple_of: int = 1) -> list[int]:
    """The sizes up to ``limit`` (all up to 130, then around powers of two) for which an
    equality the trace assumed about this size alone fails. A Python loop over chunks (``range(length // chunk)``) fixes the chunk count so;
    inequalities are left alone, as stride and memory-format queries make many that change no
    value."""
    import sympy

    symbol = size.node.expr
    if not symbol.is_Symbol:
        return []
    equalities = [
        g.expr
        for g in size.node.shape_env.guards
        if isinstance(g.expr, sympy.Eq)
        and g.expr.free_symbols == {symbol}
        and not str(g.sloc).endswith(_LAYOUT_QUERIES)
    ]
    sizes = [*range(2, min(limit, 130)), *(2**k + d for k in range(8, 17) for d in (-1, 0, 1))]
    if not equalities:
        return []
    sizes = [v for v in sizes if v % multiple_of == 0]  # the sizes the input takes
    return [v for v in sizes if v <= limit and any(fails_at(e, symbol, v) for e in equalities)]


# torch's own questions about strides (can a reshape be a view, is a tensor contiguous): their
# answer picks a memory layout, never a value, so a length they guarded on changes no output
_LAYOUT_QUERIES = (
    "in _reshape_view_helper_core_alg)",
    "in check_contiguous_sizes_strides)",
    "in is_contiguous)",
    "in should_swap)",
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


# torch's own frames, as torch shortens them (``nn/modules/module.py:1789 in _call_impl``)
_FRAMEWORK = (
    "nn/modules/",
    "_export/",
    "_subclasses/",
    "fx/",
    "_refs/",
    "_prims",
    "torch/",
    "utils/_",
)


class GuardSites(logging.Handler):
    """Where the model's code made each guard on an input's size, from torch's symbolic-shape log
    while exporting: so a refusal can say which line fixed or bounded a length.

    ``with GuardSites() as sites: torch.export.export(...)``, then ``sites.of(index, axis)``."""

    LOGGER = "torch.fx.experimental.symbolic_shapes"
    _CREATED = re.compile(r"create_symbol (\w+) = \S+ for .*\[(\d+)\]\.size\(\)\[(\d+)\]")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.symbols: dict[tuple[int, int], str] = {}  # (input index, axis) -> symbol
        self.guards: list[tuple[str, str]] = []  # (expression, where)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return
        if message.startswith("create_symbol"):
            found = self._CREATED.match(message)
            if found:
                self.symbols.setdefault((int(found[2]), int(found[3])), found[1])
        elif "[guard added]" in message and len(record.args or ()) >= 3:
            where = getattr(record.args[2], "maybe_user_loc", None) or str(record.args[2])
            self.guards.append((str(record.args[1]), where.strip("() ")))

    def of(self, index: int, axis: int) -> list[str]:
        """The distinct places that guarded input ``index``'s size on ``axis``, in order."""
        symbol = self.symbols.get((index, axis))
        if symbol is None:
            return []
        word = re.compile(rf"\b{symbol}\b")
        sites = [where for expr, where in self.guards if word.search(expr)]
        return list(dict.fromkeys(s for s in sites if not s.startswith(_FRAMEWORK)))

    def __enter__(self) -> GuardSites:
        logger = logging.getLogger(self.LOGGER)
        self._saved = logger.level, logger.propagate, logger.handlers, logging.root.manager.disable
        if self._saved[3] >= logging.INFO:  # logging.disable(WARNING) would hide the records
            logging.disable(logging.DEBUG)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # collected here, not printed
        logger.handlers = [self]
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger(self.LOGGER)
        logger.setLevel(self._saved[0])
        logger.propagate = self._saved[1]
        logger.handlers = self._saved[2]
        logging.disable(self._saved[3])


def where_guarded(sites: GuardSites | None, specs: list[TensorSpec], names: list[str]) -> str:
    """`` (guarded at file:line in function; ...)`` for the inputs ``names`` (``input[axis]=...``
    or bound strings start with the input's name), or nothing where no site was logged."""
    if sites is None:
        return ""
    found: list[str] = []
    for index, spec in enumerate(specs):
        if any(n.startswith(f"{spec.name}[") or f" {spec.name}[" in n for n in names):
            for axis, dim in enumerate(spec.dims):
                if isinstance(dim, str):
                    found += sites.of(index, axis)
    found = list(dict.fromkeys(found))
    return f" (guarded at {'; '.join(found[:3])})" if found else ""


def model_site(exc: BaseException) -> str:
    """`` at modeling_x.py:123 in fn (`line`)``: the innermost frame of the model's own code
    (transformers' or remote code) in ``exc``'s traceback, where a trace failed; else nothing."""
    import traceback

    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "/torch/" not in f.filename
        and "/mobius/" not in f.filename
        and "/patterns/" not in f.filename
        and "/lowering/" not in f.filename
    ]
    if not frames:
        return ""
    frame = frames[-1]
    line = f" (`{frame.line.strip()[:120]}`)" if frame.line else ""
    return f" at {Path(frame.filename).name}:{frame.lineno} in {frame.name}{line}"
