"""What ``mobius verify`` found: per graph and output, the numbers and the verdict; as a terminal
table and as JSON."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mobius.errors import OutputError
from mobius.verification.compare import OutputCheck, TokensCheck
from mobius.verification.tolerance import Tolerance


@dataclass
class VerifyReport:
    """The result of comparing a converted package with its PyTorch model.

    ``exit_code`` is 0 when every output is within tolerance (and, at full precision, every
    greedy token equals PyTorch's), else 1."""

    model: str
    package: str
    model_type: str
    task: str
    dtype: str
    reference_dtype: str
    tolerance: Tolerance
    inputs: str
    outputs: list[OutputCheck] = field(default_factory=list)
    tokens: list[TokensCheck] = field(default_factory=list)
    components: list[str] = field(default_factory=list)  # diffusers: the components checked

    @property
    def passed(self) -> bool:
        judged = [o for o in self.outputs if o.judged]
        return all(o.passed for o in judged) and all(t.passed for t in self.tokens)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_json(self) -> str:
        return json.dumps(
            {
                "model": self.model,
                "package": self.package,
                "model_type": self.model_type,
                "task": self.task,
                "dtype": self.dtype,
                "reference_dtype": self.reference_dtype,
                "tolerance": self.tolerance.to_json(),
                "inputs": self.inputs,
                "components": self.components,
                "passed": self.passed,
                "outputs": [o.to_json() for o in self.outputs],
                "tokens": [t.to_json() for t in self.tokens],
            },
            indent=2,
        )

    def write_json(self, path: str | os.PathLike) -> None:
        """Write ``to_json()`` to ``path``; an OutputError (one line) when it cannot."""
        try:
            Path(path).write_text(self.to_json() + "\n", encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"could not write {path}: {exc.strerror or exc}") from exc

    def render_text(self) -> str:
        lines = [
            f"{self.model_type} {self.task}: package {self.dtype}, PyTorch {self.reference_dtype}",
            f"inputs: {self.inputs}",
            f"tolerance: {self.tolerance.describe()}",
            "",
        ]
        header = ("graph", "output", "call", "max abs", "max rel", "argmax", "limit", "")
        rows = [header] + [_row(o) for o in self.outputs]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        note = ""
        for i, row in enumerate(rows):
            if i and self.outputs[i - 1].note != note:
                note = self.outputs[i - 1].note
                lines.append(f"-- {note}")
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        for t in self.tokens:
            steps = len(t.expected[0]) if t.expected else 0
            verdict = "equal" if t.equal else "differ"
            why = "" if t.judged or t.equal or t.note else " (not judged)"
            lines.append(
                f"greedy tokens ({t.graph}, {len(t.expected)} rows x {steps}): {verdict}{why}"
            )
            if t.note:
                lines[-1] += f" -- {t.note}"
            if not t.equal:
                lines += [
                    f"  PyTorch {e}\n  package {a}"
                    for e, a in zip(t.expected, t.actual, strict=True)
                ]
        failed = [o for o in self.outputs if o.judged and not o.passed]
        lines.append("")
        if self.passed:
            count = sum(o.judged for o in self.outputs)
            lines.append(f"PASS: {count} outputs within tolerance")
        else:
            what = [f"{o.graph} {o.output} ({o.call or 'one call'})" for o in failed]
            what += [f"{t.graph} greedy tokens" for t in self.tokens if not t.passed]
            lines.append(f"FAIL: outside tolerance: {', '.join(what)}")
        return "\n".join(lines) + "\n"


def _row(o: OutputCheck) -> tuple[str, ...]:
    argmax = "" if o.argmax is None else f"{o.argmax:.0%} of {o.rows}"
    if o.cosine is not None and o.argmax is None:
        argmax = f"cos {o.cosine:.4f}"
    return (
        o.graph,
        o.output,
        o.call or "-",
        f"{o.max_abs:.2e}",
        f"{o.max_rel:.2e}",
        argmax,
        o.limit if o.judged else "",
        "info" if not o.judged else "ok" if o.passed else "FAIL",
    )
