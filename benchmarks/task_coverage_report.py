"""Tables for docs/coverage.md from ``task_coverage.py``'s output lines (``task type {json}``).

    python benchmarks/task_coverage_report.py benchmarks/results/task_coverage.log > tables.md

Several logs may be given; a later line for the same (task, type) wins (a re-run after a fix).
One table per task, with its counts; an encoder-decoder refusal counts as ``enc-dec``.
"""

from __future__ import annotations

import collections
import json
import sys

ORDER = [
    "fill-mask",
    "text-classification",
    "token-classification",
    "question-answering",
    "multiple-choice",
    "image-classification",
    "zero-shot-image-classification",
    "automatic-speech-recognition",
    "audio-classification",
]


# what is known of a pair that still mismatches (a diff says nothing by itself)
MISMATCH_CAUSES = {
    "mobilebert": "float32 rounding: the random-weight NoNorm stack has no normalisation, logits "
    "reach 3.8e6 and the diff is 3.7e-6 of them",
    "efficientnet": "float32 rounding, activations of 1e3..1e6 without normalisation (second probe)",
    "levit": "float32 rounding, activations of 1e3..1e6 (second probe)",
    "textnet": "float32 rounding, activations of 1e3..1e6 (second probe)",
    "mobilevit": "float32 rounding, activations of 1e3..1e6 (second probe)",
    "perceiver": "not investigated (logits of order 1: may be a real difference)",
}


def read(paths: list[str]) -> dict[str, dict[str, dict]]:
    results: dict[str, dict[str, dict]] = collections.defaultdict(dict)
    for path in paths:
        with open(path) as lines:
            for line in lines:
                parts = line.strip().split(" ", 2)
                if len(parts) == 3 and parts[0] in ORDER and parts[2].startswith("{"):
                    results[parts[0]][parts[1]] = json.loads(parts[2])
    return results


def tables(results: dict[str, dict[str, dict]]) -> list[str]:
    out: list[str] = []
    for task in ORDER:
        rows = results.get(task)
        if not rows:
            continue
        for row in rows.values():
            if "encoder-decoder model" in row.get("reason", ""):
                row["status"] = "enc-dec"
        count = collections.Counter(r["status"] for r in rows.values())
        buildable = len(rows) - count["hf"]
        out += [
            "",
            f"## {task}",
            "",
            f"{len(rows)} pairs probed: {count['pass']} pass, {count['mismatch']} mismatch, "
            f"{count['fail']} fail, {count['enc-dec']} encoder-decoder (refused), {count['hf']} "
            f"not buildable by transformers from the tiny config. Pass rate: {count['pass']}/"
            f"{buildable} of the buildable pairs, {count['pass']}/{buildable - count['enc-dec']} "
            "without the encoder-decoders.",
            "",
            "| type | status | max diff, or reason |",
            "|---|---|---|",
        ]
        for name in sorted(rows):
            row = rows[name]
            detail = f"{row['max_diff']:.1e}" if "max_diff" in row else row.get("reason", "")
            if row["status"] == "mismatch" and name in MISMATCH_CAUSES:
                detail += f": {MISMATCH_CAUSES[name]}"
            detail = detail.replace("|", "/").replace("\n", " ")[:240]
            out.append(f"| {name} | {row['status']} | {detail} |")
    return out


if __name__ == "__main__":
    print("\n".join(tables(read(sys.argv[1:]))))
