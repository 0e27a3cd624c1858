"""Breadth sweep for vision–language models (issue 19): every type in
``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``, each in a fresh subprocess with a timeout:

1. build the tiny HF model (``mobius.testing.vlm.tiny_vlm``: every parameter random) and load it
   back from its checkpoint, the reference;
2. convert it with ``mobius.build`` (image-text-to-text: three graphs);
3. ``mobius.testing.vlm.vlm_parity``: image features, prefill logits with two images of
   different sizes (where the layout takes them; ``images`` in the results says how many went)
   in the first row of a batch of two (the other row text only, left-padded), one cached step,
   12 greedy tokens (and each step's logits) against HF ``generate``; atol 1e-4.

The mapping's encoder–decoders (Florence-2, Pix2Struct, T5Gemma 2, ...: the image goes into the
encoder graph) are checked by ``seq2seq_coverage.py``'s harness instead (two graphs, encoder output and
decoder parity), whose rows share this file.

Results: ``benchmarks/results/vlm_coverage.json`` (merged by type) and a table on stdout.

    nice -n 10 python benchmarks/vlm_coverage.py             # every type
    python benchmarks/vlm_coverage.py --only llava gemma3    # some types
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import seq2seq_coverage  # sibling modules
import sweep_versions

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "vlm_coverage.json"
ATOL = 1e-4
# images in the prompt's first row: two, of different sizes where the layout allows
IMAGES = 2
# the families the split was written against first: swept first
FIRST = ("llava", "gemma3", "paligemma", "qwen2_vl", "qwen2_5_vl", "idefics3", "smolvlm")

ONE = """
import json, sys
from pathlib import Path
model_type, work = sys.argv[1], Path(sys.argv[2])
def done(status, **extra):
    print("RESULT " + json.dumps({"status": status, **extra}))
    sys.exit(0)
def first_line(exc):
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
try:
    from mobius.testing.vlm import tiny_vlm
    model, _ = tiny_vlm(model_type, work / "hf")
except Exception as exc:
    done("hf-build-error", error=first_line(exc))
from mobius.testing.vlm import not_image_text_generation
reason = not_image_text_generation(model)
if reason:
    done("not-image-text", error=reason)
import mobius
from mobius.sources.config import from_hf
from mobius.tasks.vlm_unsplit import why_not_split
unsplit = why_not_split(from_hf(model.config))  # what --task image-text-to-text refuses with
if unsplit:
    done("convert-error", error=unsplit)
from mobius.testing.vlm import vlm_parity
try:
    package = mobius.build(work / "hf")
    graphs = sorted(package.graphs())
    out = package.save(work / "onnx")
except Exception as exc:
    done("convert-error", error=first_line(exc))
try:
    r = vlm_parity(model, out, images=int(sys.argv[4]))
except Exception as exc:
    done("run-error", error=first_line(exc), graphs=graphs)
worst = max(r["features_diff"], r["prefill_diff"], r["decode_diff"], r["generate_logits_diff"])
status = "pass" if worst <= float(sys.argv[3]) and r["tokens_equal"] else "mismatch"
done(status, **{k: v for k, v in r.items() if k not in ("tokens", "hf_tokens")})
"""


def all_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    rest = sorted(set(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES) - set(FIRST))
    return [*FIRST, *rest]


def run_one(model_type: str, timeout: int, images: int = IMAGES) -> dict:
    if model_type in seq2seq_coverage.IMAGE_TEXT_TYPES:  # an image encoder-decoder
        return seq2seq_coverage.run_one(model_type, max(timeout, 600))
    with tempfile.TemporaryDirectory(prefix=f"vlm-{model_type}-") as work:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", ONE, model_type, work, str(ATOL), str(images)],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "error": f"over {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return {"status": "crash", "error": (proc.stderr.strip().splitlines() or [""])[-1][:300]}
    return json.loads(lines[-1].removeprefix("RESULT "))


def table(results: dict) -> str:
    rows = ["| type | status | images | worst diff / reason |", "|---|---|---|---|"]
    for model_type, r in sorted(results.items()):
        diffs = [r[k] for k in r if k.endswith("_diff")]
        detail = f"{max(diffs):.1e}" if diffs else r.get("error", "")
        images = r.get("images", 1 if diffs else "")  # rows without it: swept with one image
        rows.append(f"| {model_type} | {r['status']} | {images} | {detail} |")
    return "\n".join(rows)


def summary(results: dict) -> str:
    """Counts by status, and the pass rate over the types whose HF model could be built."""
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    built = len(results) - counts.get("hf-build-error", 0)
    passed = counts.get("pass", 0)
    generators = built - counts.get("not-image-text", 0)

    def rate(total: int) -> str:
        return f"{passed}/{total} = {100 * passed / total:.0f}%" if total else "n/a"

    shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return (
        f"{len(results)} types swept: {shown}; pass rate over buildable types {rate(built)}, "
        f"over buildable image-text generators {rate(generators)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="these types only")
    parser.add_argument("--skip-done", action="store_true", help="types already in the results")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--images", type=int, default=IMAGES, help="images in the prompt")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSON file to merge into")
    parser.add_argument("--reverse", action="store_true", help="from the end of the list")
    args = parser.parse_args()
    path = args.results
    results = json.loads(path.read_text()) if path.exists() else {}
    todo = args.only or all_types()
    sweep_versions.record("vlm", bool(args.only or args.skip_done))
    for model_type in reversed(todo) if args.reverse else todo:
        if args.skip_done and model_type in results:
            continue
        results[model_type] = run_one(model_type, args.timeout, args.images)
        print(model_type, json.dumps(results[model_type]), flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print()
    print(table(results))
    print(summary(results))


if __name__ == "__main__":
    main()
