"""Tables for docs/coverage.md from ``task_coverage.py``'s results.

    python benchmarks/task_coverage_report.py > tables.md             # results/task_coverage.json
    python benchmarks/task_coverage_report.py run.log [more.log ...]  # a sweep's --log lines

The results are ``benchmarks/results/task_coverage.json``, where the sweep merges the latest
result per (task, type); logs (``task type {json}`` lines, not committed) are merged the same
way, in the order given: a later line for the same (task, type) wins (a re-run after a fix), but a
time-out does not replace an earlier result (the machine's load, not the code, decides it). One
table per task, with its counts; an encoder-decoder refusal counts as ``enc-dec``. Each row says
the code revision it was measured on (a log's ``# revision`` line before it; ``s6`` for lines
older than those headers; ``+ fan-in`` where the run used ``--fan-in-init``). Only the pairs
``task_coverage.py`` now selects are shown; a selected pair without a result counts as ``not
run``.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

ORDER = [
    "feature-extraction",
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
    name: "float32 rounding of activations of 1e3..1e6 that the random weights at std 0.3 build "
    "in a stack with no adaptive normalisation; with weights at 1/sqrt(fan-in) "
    "(`--fan-in-init`) the pair passes where it was re-run (rows marked fan-in)"
    for name in ("mobilebert", "efficientnet", "levit", "textnet", "mobilevit", "perceiver")
}

# why a pair still fails, where mobius' first error line does not say it by itself
FAIL_CAUSES = {
    "big_bird": "block-sparse attention above 704 tokens ((5 + 2 x 3 random blocks) x 64 in the "
    "tiny config), full attention below: from f41faa9 the graph is kept up to 704 tokens, "
    "checked at run time (a length-bound fallback); this pair was not re-run since",
    "bigbird_pegasus": "BigBird's encoder: full attention up to 704 tokens, block-sparse above "
    "(from e584f25 kept up to 704 tokens, checked at run time)",
    "funnel": "relative positions were Python lists of the example length (`list(range(seq_len))` "
    "in get_position_embeds) and the pooling used ceil_mode: fixed in f7953f5 (symbolic "
    "positions, dynamic ceil-mode pooling; every head pair re-run since passes; this pair "
    "was not re-run)",
    "canine": "local attention chunks come from a Python loop over the length "
    "(`range(start, seq_len, stride)` in CanineAttention): fixed in 20f08d4 (chunk mask, "
    "gathers), not re-run yet for this pair",
    "longformer": "window padding and global tokens gathered with nonzero: fixed in 796beab "
    "(dense window and global attention), not re-run yet for this pair",
    "led": "its encoder is Longformer's: fixed by the LED override (5ceb8e8), not re-run yet for "
    "this pair",
    "sew-d": "XSoftmax fills with a 0-dim CPU tensor (`torch.tensor(finfo.min)`), which "
    "masked_fill refuses on meta tensors (fixed in e584f25: shims.ScalarFillsOnMeta)",
    "convnext": "the early layer-count check read ConvNeXt's per-stage layer indices as one stack "
    "(fixed in e584f25: the check is for text stacks only)",
    "convnextv2": "as convnext: per-stage layer indices (fixed in e584f25)",
    "qwen3_asr": "refused since d635006: a speech LLM converts as its three graphs; a head would "
    "leave out the audio path that Qwen3ASRModel runs on (its text path alone passed at 5bad28b)",
    "omniasr_ctc": "takes `input_values` `[batch, 1, num_samples]` with a `padding_mask`, not the "
    "wav2vec2 layout of CONTRACTS.md",
    "pp_lcnet": "its classifier returns the scores as `last_hidden_state`, not `logits`",
    "bros": "needs `bbox` boxes, an input CONTRACTS.md does not define",
    "lxmert": "needs `visual_feats` and `visual_pos` (region features), not in CONTRACTS.md",
    "videoprism": "takes video (`pixel_values_videos`), not in CONTRACTS.md",
    "siglip2": "NaFlex inputs (`pixel_attention_mask`, `spatial_shapes`), not in CONTRACTS.md",
    "mobilevitv2": "not investigated (the traced unfold sees a 4x4 map for 8x8 patches)",
    "t5gemma2": "over the probe's time limit under load (its text-classification also timed out "
    "at 200 s; not a known failure)",
    "shieldgemma2": "not investigated (the tiny config's image token id is outside its vocab)",
}

# pairs whose transformers forward fails only because of the inputs mobius declares: mobius' gap
OUR_INPUTS = {
    "granite_speech5_ctc": "its input width is 4 x num_mel_bins (mel frames delta-expanded and "
    "stacked in pairs by its feature extractor), which no config field states: the declared "
    "input_features are 80 wide, the model reads 320",
}


def _task_coverage():
    sys.path.insert(0, str(Path(__file__).parent))
    import task_coverage

    return task_coverage


def load() -> dict[str, dict[str, dict]]:
    """The committed results (``benchmarks/results/task_coverage.json``)."""
    return _task_coverage().load()


def read(paths: list[str]) -> dict[str, dict[str, dict]]:
    """The results in a sweep's logs, merged in the order given (``task_coverage.merge``)."""
    merge = _task_coverage().merge
    results: dict[str, dict[str, dict]] = {}
    for path in paths:
        revision = "s6"
        with open(path) as lines:
            for line in lines:
                if line.startswith("# revision "):  # "+ fan-in": weights at 1/sqrt(fan-in)
                    revision = line.split()[2] + (" fan-in" if "init fan-in" in line else "")
                parts = line.strip().split(" ", 2)
                if len(parts) == 3 and parts[0] in ORDER and parts[2].startswith("{"):
                    merge(
                        results, parts[0], parts[1], {**json.loads(parts[2]), "revision": revision}
                    )
    return results


def selected(results: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """``results`` limited to the pairs ``task_coverage.py`` selects, with ``not run`` rows for
    the selected pairs that have no line."""
    chosen = _task_coverage().pairs(ORDER)
    return {
        task: {
            name: results.get(task, {}).get(name, {"status": "not run", "revision": ""})
            for name in sorted(chosen[task])
        }
        for task in ORDER
        if task in chosen
    }


def tables(results: dict[str, dict[str, dict]]) -> list[str]:
    out: list[str] = []
    for task in ORDER:
        rows = results.get(task)
        if not rows:
            continue
        for name, row in rows.items():
            if "encoder-decoder model" in row.get("reason", ""):
                row["status"] = "enc-dec"
            if name in OUR_INPUTS and row["status"] == "hf":
                row.update(status="fail", reason=OUR_INPUTS[name])
        count = collections.Counter(r["status"] for r in rows.values())
        buildable = len(rows) - count["hf"] - count["not run"]
        out += [
            "",
            f"## {task}",
            "",
            f"{len(rows)} pairs: {count['pass']} pass, {count['mismatch']} mismatch, "
            f"{count['fail']} fail, {count['enc-dec']} encoder-decoder (refused), {count['hf']} "
            f"not buildable by transformers from the tiny config, {count['not run']} not run. "
            f"Pass rate: {count['pass']}/{buildable} of the buildable pairs run.",
            "",
            "| type | status | max diff, or reason | rev |",
            "|---|---|---|---|",
        ]
        for name in sorted(rows):
            row = rows[name]
            detail = f"{row['max_diff']:.1e}" if "max_diff" in row else row.get("reason", "")
            if row["status"] == "mismatch" and name in MISMATCH_CAUSES:
                detail += f": {MISMATCH_CAUSES[name]}"
            if row["status"] == "fail" and name in FAIL_CAUSES:
                detail = f"{FAIL_CAUSES[name]} ({detail[:120]})"
            detail = detail.replace("|", "/").replace("\n", " ")[:300]
            out.append(f"| {name} | {row['status']} | {detail} | {row.get('revision', '')} |")
    return out


def totals(results: dict[str, dict[str, dict]]) -> str:
    """One line: the counts over every task (after ``tables`` has marked encoder-decoders)."""
    count = collections.Counter(r["status"] for rows in results.values() for r in rows.values())
    probed = sum(count.values()) - count["not run"]
    buildable = probed - count["hf"]
    return (
        f"**Totals** ({probed} pairs probed, {count['not run']} selected pairs not run): "
        f"{count['pass']} pass, {count['mismatch']} mismatch, {count['fail']} fail, "
        f"{count['enc-dec']} encoder-decoder heads refused, {count['hf']} not buildable by "
        f"transformers. Pass rate {count['pass']}/{buildable} "
        f"({100 * count['pass'] / max(buildable, 1):.0f}%) of the buildable pairs probed."
    )


if __name__ == "__main__":
    found = selected(read(sys.argv[1:]) if sys.argv[1:] else load())
    lines = tables(found)
    print(totals(found))
    print("\n".join(lines))
