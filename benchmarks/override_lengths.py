"""Overrides whose trace must hold at every length: converted, then checked at many lengths.

Two families are rewritten by ``mobius/synth/overrides`` so that one trace serves any length, and
their conversions are among the slowest (a minute or more each), so these checks run here rather
than in the test suite (which checks each override against HF in PyTorch at every length):

- ``blt``: patches of data-dependent lengths (the entropy threshold set between two entropies of
  a 30-byte prompt, ``mobius.testing.causal_lm.blt_with_varied_patches``): prefill and a cached
  step at 1, 9, 25 and 30 bytes (one byte reshapes to a runtime size of 0);
- ``deepseek_v4``: compressor windows of 8 tokens and an indexer top-k of 3, no cache: the logits
  at 1, 4, 7, 9, 16 and 33 tokens, left-padded.

Each against PyTorch at atol 1e-4. Results: ``benchmarks/results/override_lengths.json``.

    PYTHONPATH=. python benchmarks/override_lengths.py [--only blt deepseek_v4]
"""

from __future__ import annotations

import argparse
import datetime
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers

import mobius
from mobius.testing.causal_lm import (
    DEEPSEEK_V4_SMALL_WINDOWS,
    blt_with_varied_patches,
    tiny_causal_lm,
)
from mobius.testing.parity import OnnxCausalLM, causal_lm_parity, decoder_inputs

ATOL = 1e-4
RESULTS = Path(__file__).resolve().parent / "results" / "override_lengths.json"


def check_blt(work: Path) -> dict[str, float]:
    model, config = blt_with_varied_patches()
    model.save_pretrained(work / "hf")
    out = mobius.build(work / "hf").save(work / "onnx")
    return {
        str(length): causal_lm_parity(model, out, config, length=length)["max_diff"]
        for length in (1, 9, 25, 30)
    }


def check_deepseek_v4(work: Path) -> dict[str, float]:
    model, config = tiny_causal_lm("deepseek_v4", **DEEPSEEK_V4_SMALL_WINDOWS)
    model.save_pretrained(work / "hf")
    out = mobius.build(work / "hf").save(work / "onnx")
    diffs = {"parity": causal_lm_parity(model, out, config)["max_diff"]}
    lm = OnnxCausalLM(out)
    for length in (1, 4, 7, 9, 16, 33):
        feeds = decoder_inputs(config.vocab_size, length=length, pad=min(3, length - 1))
        with torch.no_grad():
            expected = model(**feeds).logits.numpy()
        ids, mask, positions = (
            feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids")
        )
        actual, _ = lm.run(ids, mask, positions, lm.empty_cache(len(ids)))
        diffs[str(length)] = float(np.abs(actual - expected)[mask.astype(bool)].max())
    return diffs


CHECKS = {"blt": check_blt, "deepseek_v4": check_deepseek_v4}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(CHECKS), default=sorted(CHECKS))
    args = parser.parse_args(argv)
    results = {}
    for name in args.only:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as work:
            diffs = CHECKS[name](Path(work))
        worst = max(diffs.values())
        results[name] = {
            "status": "pass" if worst <= ATOL else "mismatch",
            "max_diff": worst,
            "diffs": diffs,
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(name, json.dumps(results[name]), flush=True)
    document = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": {
            "mobius": mobius.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "results": results,
    }
    RESULTS.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r["status"] == "pass" for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
