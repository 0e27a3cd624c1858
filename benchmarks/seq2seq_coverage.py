"""Breadth sweep for encoder–decoder types (issue 14): every type in
``MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES`` and ``MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES``
whose tiny config is an encoder–decoder, each in a fresh subprocess with a timeout:

1. build the tiny HF model (``mobius.testing.seq2seq.tiny_seq2seq``: every parameter random) and
   load it back from its checkpoint, the reference;
2. convert it with ``mobius.build`` (two graphs);
3. ``mobius.testing.seq2seq.seq2seq_parity``: encoder output, 4-token decoder prefill, one cached
   step, 12 greedy tokens (and each step's logits) against HF ``generate``, batch 2, right-padded
   text input; atol 1e-4.

Results: ``benchmarks/results/seq2seq_coverage.json`` (merged by type) and a table on stdout.
``--image-text``: the encoder–decoder types of ``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``
(Florence-2, Pix2Struct, ...: the image into the encoder graph), merged into
``benchmarks/results/vlm_coverage.json`` beside the three-graph VLMs.

    nice -n 10 python benchmarks/seq2seq_coverage.py            # every type
    python benchmarks/seq2seq_coverage.py --only t5 whisper     # some types
    python benchmarks/seq2seq_coverage.py --image-text          # image encoder-decoders
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import sweep_versions  # sibling module

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "seq2seq_coverage.json"
IMAGE_TEXT_RESULTS = ROOT / "benchmarks" / "results" / "vlm_coverage.json"
# image-text-to-text types whose tiny model is an encoder-decoder (the others: vlm_coverage.py)
IMAGE_TEXT_TYPES = (
    "florence2", "pix2struct", "pp_formulanet", "t5gemma2", "udop", "vision-encoder-decoder",
)  # fmt: skip
ATOL = 1e-4

ONE = """
import json, sys
from pathlib import Path
model_type, work = sys.argv[1], Path(sys.argv[2])
def done(status, **extra):
    print("RESULT " + json.dumps({"status": status, **extra}))
    sys.exit(0)
try:
    from mobius.testing.seq2seq import tiny_seq2seq
    model, _ = tiny_seq2seq(model_type, work / "hf")
except Exception as exc:
    done("hf-build-error", error=f"{type(exc).__name__}: {exc}"[:300])
if not model.config.is_encoder_decoder:
    done("not-encoder-decoder")
import mobius
from mobius.testing.seq2seq import seq2seq_parity
try:
    out = mobius.build(work / "hf").save(work / "onnx")
except Exception as exc:
    done("convert-error", error=f"{type(exc).__name__}: {exc}"[:300])
try:
    r = seq2seq_parity(model, out)
except Exception as exc:
    done("run-error", error=f"{type(exc).__name__}: {exc}"[:300])
worst = max(r["encoder_diff"], r["prefill_diff"], r["decode_diff"], r["generate_logits_diff"])
status = "pass" if worst <= float(sys.argv[3]) and r["tokens_equal"] else "mismatch"
report = json.loads((out / "explain.json").read_text())
fused = sum(c["component"] == "Attention" for m in report["modules"] for c in m["components"])
op_by_op = sorted({g["next_step"] for g in report["summary"]["gaps"] if g["kind"] == "attention"})
r = {**r, "fused_attention": fused, "op_by_op": op_by_op}
done(status, **{k: v for k, v in r.items() if k not in ("tokens", "hf_tokens")})
"""


def all_types() -> list[str]:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
    )

    both = [
        *MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
        *MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
    ]
    return sorted(set(both))


def run_one(model_type: str, timeout: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"s2s-{model_type}-") as work:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", ONE, model_type, work, str(ATOL)],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=ROOT,
                env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
            )
        except subprocess.TimeoutExpired:
            return {"status": "timeout"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return {"status": "crash", "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="these types only")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--image-text", action="store_true", help="image encoder-decoders")
    args = parser.parse_args()
    path = IMAGE_TEXT_RESULTS if args.image_text else RESULTS
    results = json.loads(path.read_text()) if path.exists() else {}
    todo = args.only or (IMAGE_TEXT_TYPES if args.image_text else all_types())
    sweep_versions.record("seq2seq-images" if args.image_text else "seq2seq", bool(args.only))
    for model_type in todo:
        results[model_type] = run_one(model_type, args.timeout)
        print(model_type, json.dumps(results[model_type]), flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print("\n| type | status | worst diff / reason | fused Attention |\n|---|---|---|---|")
    for model_type, r in sorted(results.items()):
        diffs = [r[k] for k in r if k.endswith("_diff")]
        detail = f"{max(diffs):.1e}" if diffs else r.get("error", "")
        fused = r.get("fused_attention", "")
        print(f"| {model_type} | {r['status']} | {detail} | {fused} |")


if __name__ == "__main__":
    main()
