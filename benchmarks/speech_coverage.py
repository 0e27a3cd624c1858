"""Breadth sweep for decoder-only speech LLMs (issue 30): each listed type in a fresh subprocess
with a timeout:

1. build the tiny HF model (``mobius.testing.audio_llm.tiny_audio_llm``: every parameter random)
   and load it back from its checkpoint, the reference;
2. convert it with ``mobius.build`` and no task (detection must give the three audio graphs);
3. ``mobius.testing.audio_llm.audio_parity``: audio features of a batch of two clips of different
   lengths (with their masks), prefill logits of both prompts left-padded, one cached step, 12
   greedy tokens (and each step's logits) against HF ``generate``; atol 1e-4. Models with images
   too (``mobius.testing.omni.BOTH``) are built by ``tiny_omni`` and checked by ``omni_parity``:
   image and audio features, one image and a clip in the first prompt, another clip in the second.

Results: ``benchmarks/results/speech_coverage.json`` (merged by type) and a table on stdout.

    nice -n 10 python benchmarks/speech_coverage.py               # every type
    python benchmarks/speech_coverage.py --only glmasr qwen3_asr  # some types
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import sweep_versions  # sibling module
from vlm_coverage import summary, table  # sibling module: the same statuses

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "speech_coverage.json"
ATOL = 1e-4
TYPES = (
    "qwen2_audio",
    "qwen3_asr",
    "voxtral",
    "voxtral_realtime",
    "granite_speech",
    "granite_speech_plus",
    "glmasr",
    "audioflamingo3",
    "musicflamingo",
    "fun_asr_nano",
    "kyutai_speech_to_text",
    "vibevoice_asr",
    "omniasr",
    "nemo_speechlm",
    "moss_transcribe_diarize",
    # images and audio (mobius.testing.omni): a vision encoder too, one embedding for both
    "qwen2_5_omni_thinker",
    "qwen3_omni_moe_thinker",
    "phi4_multimodal",
    "dots3_note",
)
CONTRACT = {"audio_encoder.onnx", "embedding.onnx", "decoder_model.onnx"}

ONE = """
import json, sys
from pathlib import Path
model_type, work = sys.argv[1], Path(sys.argv[2])
def done(status, **extra):
    print("RESULT " + json.dumps({"status": status, **extra}))
    sys.exit(0)
def first_line(exc):
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
from mobius.testing.omni import BOTH
if model_type in BOTH:  # images and audio
    from mobius.testing.omni import omni_parity as parity, tiny_omni as tiny
else:
    from mobius.testing.audio_llm import audio_parity as parity, tiny_audio_llm as tiny
try:
    model, _ = tiny(model_type, work / "hf")
except Exception as exc:
    done("hf-build-error", error=first_line(exc))
import mobius
try:
    package = mobius.build(work / "hf")
    graphs = sorted(package.graphs())
    out = package.save(work / "onnx")
except Exception as exc:
    done("convert-error", error=first_line(exc))
manifest = json.loads((out / "mobius.json").read_text())
if manifest.get("layout") != "audio-llm":
    done("convert-error", error=f"built as {manifest.get('task')} ({graphs}), not audio-llm")
try:
    r = parity(model, out)
except Exception as exc:
    done("run-error", error=first_line(exc), graphs=graphs)
worst = max(r["features_diff"], r["prefill_diff"], r["decode_diff"], r["generate_logits_diff"])
status = "pass" if worst <= float(sys.argv[3]) and r["tokens_equal"] else "mismatch"
done(status, task=manifest["task"], modalities=manifest.get("modalities"), **{k: v for k, v in r.items() if k not in ("tokens", "hf_tokens")})
"""


def run_one(model_type: str, timeout: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"speech-{model_type}-") as work:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", ONE, model_type, work, str(ATOL)],
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="these types only")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSON file to merge into")
    args = parser.parse_args()
    path = args.results
    results = json.loads(path.read_text()) if path.exists() else {}
    sweep_versions.record("speech", bool(args.only))
    for model_type in args.only or TYPES:
        results[model_type] = run_one(model_type, args.timeout)
        print(model_type, json.dumps(results[model_type]), flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print()
    print(table(results))
    print(summary(results))


if __name__ == "__main__":
    main()
