"""The numbers of one compared output (``mobius.verification.pairs.Pair``) and its verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from mobius.verification.pairs import Pair, Tokens
from mobius.verification.tolerance import Tolerance


@dataclass
class OutputCheck:
    """One output of one graph call: how far onnxruntime is from PyTorch, and the verdict.

    ``max_rel`` is ``max_abs`` over the largest magnitude PyTorch gives for that output;
    ``argmax`` the share of score rows whose top-1 agrees (None for outputs that are not
    scores); ``cosine`` the lowest cosine similarity of a row (quantized packages only)."""

    graph: str
    output: str
    call: str
    shape: list[int]
    max_abs: float
    max_rel: float
    argmax: float | None
    rows: int
    cosine: float | None
    limit: str
    passed: bool
    judged: bool = True  # False: reported only (a quantized package's float-weight comparison)
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class TokensCheck:
    """Greedy tokens of a generative task, the package's against PyTorch's."""

    graph: str
    equal: bool
    judged: bool  # whether they decide the verdict (full precision only)
    actual: list[list[int]]
    expected: list[list[int]]
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.equal or not self.judged

    def to_json(self) -> dict:
        return asdict(self)


def check_output(pair: Pair, tolerance: Tolerance) -> OutputCheck:
    """Judge ``pair`` by ``tolerance`` (scaled for its graph)."""
    rule = tolerance.scaled(pair.graph)
    actual, expected = pair.kept()
    diff = np.abs(actual - expected)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    finite = bool(np.isfinite(actual).all())
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    argmax = rows = None
    if pair.scores and actual.size:
        a, e = _rows(actual), _rows(expected)
        rows = len(a)
        argmax = float((a.argmax(-1) == e.argmax(-1)).mean())
    cosine = None
    if rule.kind == "top-1":
        cosine = _lowest_cosine(actual, expected)
        if argmax is not None:
            passed, limit = argmax >= rule.top1, f"top-1 >= {rule.top1:.0%}"
        else:
            passed, limit = cosine >= rule.cosine, f"cosine >= {rule.cosine}"
    else:
        bound = rule.bound * max(1.0, scale)
        passed, limit = max_abs <= bound, f"<= {bound:.1e}"
    return OutputCheck(
        graph=pair.graph,
        output=pair.output,
        call=pair.call,
        shape=list(pair.actual.shape),
        max_abs=max_abs,
        max_rel=max_rel,
        argmax=argmax,
        rows=rows or 0,
        cosine=cosine,
        limit=limit,
        passed=passed and finite,
    )


def check_tokens(tokens: Tokens, tolerance: Tolerance) -> TokensCheck:
    return TokensCheck(
        graph=tokens.graph,
        equal=tokens.equal(),
        judged=tolerance.tokens,
        actual=np.asarray(tokens.actual).tolist(),
        expected=np.asarray(tokens.expected).tolist(),
    )


def _rows(values: np.ndarray) -> np.ndarray:
    return values.reshape(-1, values.shape[-1]) if values.ndim > 1 else values[None]


def _lowest_cosine(actual: np.ndarray, expected: np.ndarray) -> float:
    """The smallest cosine similarity over the rows (last axis) of two arrays."""
    a, e = _rows(actual).astype(np.float64), _rows(expected).astype(np.float64)
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(e, axis=-1)
    dots = (a * e).sum(-1)
    cosines = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 1.0)
    return float(cosines.min()) if cosines.size else 1.0
