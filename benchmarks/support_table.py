"""The support table that ``mobius list`` and ``mobius info`` read (``mobius/support/table.json``),
generated from the sweeps' results:

- ``results/coverage.json``: every causal-LM type (``coverage.py``), task ``text-generation``;
- ``results/task_coverage.json``: the head tasks (``task_coverage.py``), the latest result per
  (task, type) (a time-out never replaces a result);
- ``results/seq2seq_coverage.json``: encoder–decoders, ``text2text-generation`` or speech
  ``automatic-speech-recognition``;
- ``results/vlm_coverage.json``: ``image-text-to-text``;
- ``results/diffusers_coverage.json``: diffusers model classes, task ``diffusers``.

    python benchmarks/support_table.py          # rewrite mobius/support/table.json
    python benchmarks/support_table.py --check  # exit 1 when the file is not what it would write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TABLE = ROOT / "mobius" / "support" / "table.json"
ATOL = 1e-4
# statuses that say a type is not of the sweep's kind at all (counted elsewhere): left out
NOT_THIS_TASK = ("not-encoder-decoder",)


def entry(status: str, max_diff: float | None, reason: str = "", notes=(), run: str = "") -> dict:
    out: dict = {"status": status}
    if max_diff is not None:
        out["max_diff"] = float(f"{max_diff:.2g}")
    if reason:
        out["reason"] = " ".join(reason.split())[:600]
    if notes:
        out["notes"] = [" ".join(n.split())[:600] for n in notes]
    if run:
        out["run"] = run
    return out


def causal(types: dict) -> dict:
    import coverage_report as cr

    data = json.loads((RESULTS / "coverage.json").read_text())
    run = data["meta"]["date"]
    for name, r in data["results"].items():
        status = r["status"]
        reason = ""
        if status != "pass":
            reason = cr.KNOWN_CAUSES.get(name) or cr.detail(r) or cr.failure_class(r) or ""
        notes = []
        long = r.get("long")
        if long and long.get("max_diff", 0) > ATOL:
            cause = cr.KNOWN_LONG_CAUSES.get(name, "")
            notes.append(f"long check ({long['length']} tokens): {long['max_diff']:.1e}; {cause}")
        if r.get("genai") == "no config":
            notes.append("no genai_config.json (recurrent states or unequal key/value shapes)")
        types.setdefault(name, {})["text-generation"] = entry(
            status, r.get("max_diff"), reason, notes, run
        )
    return data["meta"]


def heads(types: dict) -> None:
    import task_coverage_report as tr

    found = tr.load()
    for task, rows in tr.selected(found).items():  # the pairs the sweep selects, as the docs
        for name, r in rows.items():
            status = r["status"]
            if status == "not run":
                continue
            reason = r.get("reason", "")
            if "encoder-decoder model" in reason:
                status = "enc-dec"
            if name in tr.OUR_INPUTS and status == "hf":
                status, reason = "fail", tr.OUR_INPUTS[name]
            if status == "mismatch" and name in tr.MISMATCH_CAUSES:
                reason = f"{reason} {tr.MISMATCH_CAUSES[name]}".strip()
            if status == "fail" and name in tr.FAIL_CAUSES:
                reason = f"{tr.FAIL_CAUSES[name]} ({reason[:120]})"
            notes = ["measured with weights at 1/sqrt(fan-in)"] if "fan-in" in r["revision"] else []
            types.setdefault(name, {})[task] = entry(
                status, r.get("max_diff"), reason, notes, r["revision"]
            )


def _worst(r: dict, keys: tuple[str, ...]) -> float | None:
    diffs = [r[k] for k in keys if isinstance(r.get(k), (int, float))]
    return max(diffs) if diffs else None


DIFFS = ("encoder_diff", "features_diff", "prefill_diff", "decode_diff", "generate_logits_diff")


def seq2seq(types: dict) -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

    data = json.loads((RESULTS / "seq2seq_coverage.json").read_text())
    for name, r in data.items():
        if r["status"] in NOT_THIS_TASK:
            continue
        task = (
            "automatic-speech-recognition"
            if name in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES
            else "text2text-generation"
        )
        types.setdefault(name, {})[task] = multi_graph(r)


def multi_graph(r: dict) -> dict:
    """An entry from a seq2seq or VLM sweep result (several graphs, greedy tokens)."""
    status = r["status"]
    reason = r.get("error", "")
    if status == "mismatch":
        parts = [f"{k.removesuffix('_diff')} {r[k]:.1e}" for k in DIFFS if r.get(k, 0) > ATOL]
        reason = "over 1e-4: " + ", ".join(parts)
        reason += "; greedy tokens equal" if r.get("tokens_equal") else "; greedy tokens differ"
    if status == "not-image-text":
        reason = reason or "not an image-to-text generator (no text generation from images)"
    notes = [f"op by op: {', '.join(r['op_by_op'])}"] if r.get("op_by_op") else []
    return entry(status, _worst(r, DIFFS), reason, notes)


def vlm(types: dict) -> None:
    data = json.loads((RESULTS / "vlm_coverage.json").read_text())
    for name, r in data.items():
        types.setdefault(name, {})["image-text-to-text"] = multi_graph(r)


def diffusers(types: dict) -> None:
    data = json.loads((RESULTS / "diffusers_coverage.json").read_text())
    for label, r in data.items():
        name, _, variant = label.partition(" (")
        task = "diffusers" + (f" ({variant}" if variant else "")
        notes = [f"graphs: {', '.join(r.get('graphs', []))}"]
        if r.get("detail"):
            notes.append(r["detail"])
        types.setdefault(name, {})[task] = entry(
            r["status"],
            r.get("max_abs_diff"),
            "" if r["status"] == "pass" else r.get("detail", ""),
            notes,
        )


def table() -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    types: dict[str, dict] = {}
    meta = causal(types)
    heads(types)
    seq2seq(types)
    vlm(types)
    diffusers(types)
    return {
        "generated_by": "benchmarks/support_table.py",
        "made_with": {k: v for k, v in meta["versions"].items()},
        "date": meta["date"],
        "method": "tiny random-weight models of each type, converted and run on onnxruntime "
        "against eager PyTorch at atol 1e-4 (docs/coverage.md)",
        "types": {name: dict(sorted(tasks.items())) for name, tasks in sorted(types.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the file, write nothing")
    args = parser.parse_args()
    text = json.dumps(table(), indent=1, sort_keys=False) + "\n"
    if args.check:
        same = TABLE.is_file() and TABLE.read_text() == text
        print(f"{TABLE} is {'up to date' if same else 'stale: rerun benchmarks/support_table.py'}")
        return 0 if same else 1
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(text)
    print(f"wrote {TABLE} ({len(json.loads(text)['types'])} types)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
