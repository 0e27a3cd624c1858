"""Fuzz ``mobius build`` for a while and print what it found.

    python benchmarks/fuzz.py --minutes 15 [--seed 0] [--json benchmarks/results/fuzz.json]

Runs the property of ``tests/mobius/testing/test_fuzz.py`` (``mobius.testing.fuzz``) over many more
mutated tiny checkpoints: every case must convert with parity or be refused with one
``mobius: error:`` line and exit 2. Failures do not stop the run; they are grouped by their first
line and printed with one reproducing case each.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

from mobius.testing.fuzz import MORE_BASES, Case, Outcome, make_bases, make_cases, run_case


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="time bound per case, s (a valid deepseek_v3 takes 45 s on two busy cores)",
    )
    parser.add_argument("--json", help="write the findings here")
    parser.add_argument(
        "--bases", default=",".join(MORE_BASES), help="model types of the tiny base checkpoints"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="mobius-fuzz-"))
    bases = make_bases(root / "bases", tuple(args.bases.split(",")))
    deadline = time.monotonic() + 60 * args.minutes
    counts: collections.Counter[str] = collections.Counter()
    refusals: collections.Counter[str] = collections.Counter()
    findings: dict[str, tuple[Case, str]] = {}
    slowest = [0.0, None]

    def one(case: Case) -> None:
        if time.monotonic() > deadline:
            return
        try:
            outcome = run_case(case, bases, root / "case", timeout=args.timeout)
        except Exception as exc:  # noqa: BLE001 - the harness's own bug: report it, go on
            outcome = Outcome("failure", f"harness error: {exc!r}")
        counts[outcome.kind] += 1
        if outcome.seconds > slowest[0]:
            slowest[:] = [outcome.seconds, case]
        if outcome.kind == "refused":
            refusals[_signature(outcome.detail)] += 1
        if outcome.kind == "failure":
            signature = _signature(outcome.detail.splitlines()[0])
            if signature not in findings:
                print(f"FOUND {signature}\n  {case}", flush=True)
            findings.setdefault(signature, (case, outcome.detail))

    batch = args.seed
    while time.monotonic() < deadline:
        test = settings(
            max_examples=50,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(given(case=make_cases(tuple(bases)))(one))
        seed(batch)(test)()
        batch += 1
        print(f"[{time.strftime('%H:%M:%S')}] {dict(counts)}", flush=True)

    print(f"\n{sum(counts.values())} cases: {dict(counts)}; slowest {slowest[0]:.1f} s")
    print("refusals by kind:")
    for signature, n in refusals.most_common():
        print(f"  {n:5d}  {signature}")
    print(f"{len(findings)} distinct failures")
    for signature, (case, detail) in findings.items():
        print(f"\n== {signature}\n{case}\n{detail[:3000]}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "cases": dict(counts),
                    "refusals": dict(refusals),
                    "failures": {
                        s: {"case": repr(c), "detail": d} for s, (c, d) in findings.items()
                    },
                },
                indent=2,
            )
        )
    return 1 if findings else 0


def _signature(line: str) -> str:
    """The line with numbers, quoted names and paths blanked, to group like outcomes."""
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", line)
    line = re.sub(r"/[\w./-]+", "PATH", line)
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", line)[:160]


if __name__ == "__main__":
    sys.exit(main())
