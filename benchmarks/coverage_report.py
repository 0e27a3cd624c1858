"""Classifying coverage results by failure class and writing docs/coverage.md (coverage.py's report)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "coverage.md"
HEAD_TASKS_MARKER = "<!-- head tasks: benchmarks/task_coverage.py -->"
ATOL = 1e-4
PREFILL = 6
LENGTH = 9  # prefill 6, then a decode step of 3 tokens on the returned cache
# and a long prompt: a prefill of 70 then a decode step of 10 (fewer where the model's position
# table is shorter): graphs that hold only for short sequences (a kernel switch above 64 tokens)
LONG_PREFILL, LONG_LENGTH = 70, 80
STATUSES = [
    "pass",
    "pass-no-cache",
    "mismatch",
    "blocked",
    "convert-error",
    "hf-build-error",
    "timeout",
]


# ---------------------------------------------------------------------------------- classification

# Failure classes: (class name, status it applies to, regex over "error where"). The first match
# wins; unmatched failures are grouped by their normalised message.
CLASS_RULES: list[tuple[str, str, str]] = [
    ("torch.export: a dynamic (sequence) dimension gets specialised (Constraints violated)",
     "convert-error", r"Constraints violated"),
    ("torch.export: TypeError 'NoneType' object is not subscriptable while tracing",
     "convert-error", r"could not trace .*NoneType' object is not subscriptable"),
    ("torch.export: other error while tracing", "convert-error", r"could not trace"),
    ("emitted graph invalid: duplicate past_key_values input (KV shared across layers)",
     "convert-error", r"Duplicate definition-site for \(past_key_values"),
    ("emitted graph rejected by onnxruntime", "convert-error", r"parity run: .*ONNXRuntimeError"),
    ("lowering: non-causal attention in a causal-LM graph", "convert-error",
     r"non-causal attention in a causal-LM graph"),
    ("lowering failed", "convert-error", r"lowering aten\.\S+ in .* failed"),
    ("config loader: non-finite float (Infinity) in config.json rejected", "convert-error",
     r"Infinity"),
    ("config loader: per-layer list where an integer is expected", "convert-error",
     r"must be an integer, got \["),
    ("config loader: other validation error", "convert-error", r"not a valid \S+ config|config field"),
    ("task detection: nested model_type has no task", "convert-error", r"no task known for model_type"),
    ("weight mapping: a parameter has no tensor in the checkpoint", "convert-error",
     r"has no tensor for parameter"),
    ("HF: needs an optional library (timm / PIL)", "hf-build-error", r"ImportError|requires the .* librar"),
    ("HF: the model cannot run on its own (needs another model's inputs, or a language set)",
     "hf-build-error", r"shared_kv_states|set_default_language|Input language unknown"),
    ("HF: the config class does not build its *ForCausalLM (missing attributes)", "hf-build-error",
     r"AttributeError: '\w+Config' object has no attribute"),
]  # fmt: skip


# Why a model was built without a cache, from the reason explain gives: (class name, regex).
NO_CACHE_RULES: list[tuple[str, str]] = [
    ("no KV cache: the model takes the whole sequence again at every step (sliced by its cache "
     "length)", r"whole sequence again"),
    ("no KV cache: bidirectional attention (an encoder)", r"attention is bidirectional"),
    ("no KV cache: the HF model neither returns a cache nor takes one", r"neither returns a cache"),
    ("no KV cache: the model's cached call reads tensor values (.item() on meta)",
     r"running the model with a cache failed.*item\(\)"),
    ("no KV cache: the model keeps its state where no adapter reads it", r"no state adapter reads"),
    ("no KV cache: the cached trace fixes the batch or sequence length to a constant",
     r"cache through the trace failed: torch\.export fixed dynamic dimensions"),
    ("no KV cache: torch.export cannot trace the cached call",
     r"cache through the trace failed: torch\.export could not trace"),
]  # fmt: skip

# What investigation found for types that do not pass, beyond what the sweep can tell itself.
KNOWN_CAUSES: dict[str, str] = {
    "xlstm": "HF's full forward runs its chunkwise kernel over whole chunks (the tiny config's "
    "chunk_size is 4) and its recurrent step over the rest; the two forms differ by 4.9e-5 even "
    "in float64 (the chunk-level stabiliser enters the normaliser's max). The graph runs the "
    "recurrent step token by token, as HF does when it decodes, and matches HF's own "
    "token-by-token decoding at 1e-4 (tests/mobius/synth/test_state_xlstm.py); against the "
    "full forward it is 1.2e-4 off on the 9-token check and 1.6e-5 on the 80-token one",
    "blt": "converts without a cache: transformers' BltModel builds its DynamicCache from the "
    "top-level config (no num_hidden_layers), and its entropy patching reads the whole prefix, so "
    "a decode step would re-patch; padded bytes reach real ones (no padding mask in the patcher "
    "or the global model), so the byte-level stacks are converted with eager attention, the "
    "reference the sweep compares with (sdpa differs on fully masked rows)",
    "deepseek_v4": "converts without a cache: the compressors' cached state (leftover tokens, "
    "their count as a Python int) has no fixed shape to carry",
    "reformer": "converts without a cache: its cache holds LSH buckets and hidden states "
    "(past_buckets_states), not keys and values; chunked LSH/local attention starts above 64 "
    "tokens, so a position table longer than 128 bounds the trace and is refused",
}

# Why some types' long check is over the tolerance, from a float64 copy of the same tiny model
# (HF's float32 forward against its float64 forward, and the graph against the float64 forward,
# over the same 80 tokens; every float32 cast inside HF's forward raised to float64): the long
# check's size of float32 rounding in recurrent layers.
_ROUNDING = (
    "float32 rounding over 80 tokens of recurrent layers, not a wrong graph: against HF in "
    "float64, HF's own float32 forward is {hf} off and the graph {graph}"
)
_QWEN3_5_ROUNDING = _ROUNDING.format(hf="2.5e-4", graph="2.8e-4") + (
    ", both at the same token of the unpadded row; the check's 1.0e-4 is in the left-padded row, "
    "where HF's float32 forward is 1.1e-4 off float64 and the graph 3.7e-5; mean |diff| 2.9e-6 "
    "(HF) and 2.4e-6 (the graph); the check gives the same 1.0e-4 with transformers 5.24.0"
)
KNOWN_LONG_CAUSES: dict[str, str] = {
    "qwen3_5": _QWEN3_5_ROUNDING,
    "qwen3_5_text": _QWEN3_5_ROUNDING,
    "qwen3_next": _ROUNDING.format(hf="2.1e-4", graph="1.1e-4"),
    "qwen3_5_moe": _ROUNDING.format(hf="1.5e-4", graph="1.1e-4") + " (by its text model)",
    "qwen3_5_moe_text": _ROUNDING.format(hf="1.5e-4", graph="1.1e-4"),
    "zamba": _ROUNDING.format(hf="8.5e-5", graph="8.9e-5")
    + " (the unpadded row; HF's float64 forward gives NaN in the left-padded one)",
}


def _no_cache_class(r: dict) -> str:
    """Why a model converted without a KV cache, from explain's gaps."""
    gaps = r.get("explain", {}).get("gaps", [])
    text = " ".join([g.get("next_step", "") for g in gaps] + [str(g.get("modules")) for g in gaps])
    for name, pattern in NO_CACHE_RULES:
        if re.search(pattern, text):
            return name
    if re.search(r"encoder_attn|crossattention|cross_attn", text):
        return (
            "no KV cache: unused cross-attention modules of a decoder count as uncaptured attention"
        )
    if re.search(r"vision|audio|visual|image", text):
        return "no KV cache: attention in vision/audio towers counts as uncaptured attention"
    if re.search(r"linear_attn|mamba|mixer|ssm|conv|recurrent|linear_attention|rwkv", text, re.I):
        return "no KV cache: recurrent / linear-attention layers (no state carried)"
    if "AttentionInterface" in text:
        return "no KV cache: hand-written attention (does not call AttentionInterface)"
    return "no KV cache: " + (_normalise(text) if text.strip() else "no gap named")


def _normalise(message: str) -> str:
    message = re.sub(r"\d+(\.\d+)?", "N", message)
    message = re.sub(r"'[^']*'", "'…'", message)
    return message[:160]


def failure_class(r: dict) -> str | None:
    status = r["status"]
    if status in ("pass",):
        return None
    if status == "pass-no-cache":
        return _no_cache_class(r)
    if status == "blocked":
        return "missing lowering: " + ", ".join(r.get("ops", []))
    text = f"{r.get('error', '')} @ {r.get('where', '')}"
    for name, applies, pattern in CLASS_RULES:
        if applies in (status, "*") and re.search(pattern, text):
            return name
    if status == "mismatch":
        return "numerical mismatch" + (" (decode only)" if r.get("prefill_diff", 1) <= ATOL else "")
    if status == "timeout":
        return "timeout"
    prefix = {"hf-build-error": "HF cannot build/run the tiny model", "convert-error": "convert"}
    return f"{prefix.get(status, status)}: {_normalise(r.get('error', ''))}"


def grouped(results: dict) -> list[tuple[str, list[str]]]:
    groups: dict[str, list[str]] = {}
    for name, r in results.items():
        if r["status"] == "blocked":
            for op in r.get("ops", []) or ["?"]:  # a type blocked by several ops is in each
                groups.setdefault(f"missing lowering {op}", []).append(name)
            continue
        cls = failure_class(r)
        if cls:
            groups.setdefault(cls, []).append(name)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def fmt_diff(r: dict) -> str:
    d = r.get("max_diff")
    return "" if d is None else f"{d:.1e}"


def detail(r: dict) -> str:
    if r["status"] == "blocked":
        return "ops: " + ", ".join(r.get("ops", []))
    if r["status"] == "pass-no-cache":
        steps = " ".join(g.get("next_step", "") for g in r.get("explain", {}).get("gaps", []))
        named = re.findall(r"pattern for ([\w, ]+?) \(", steps)
        return (failure_class(r) or "") + (f" [{named[0]}]" if named else "")
    if r["status"] == "mismatch":
        p, d = r.get("prefill_diff"), r.get("decode_diff")
        return f"prefill {p:.1e}" + (f", decode {d:.1e}" if d is not None else "")
    text = r.get("error", "")
    if r.get("where"):
        text += f" ({r['where']})"
    return text


def _long_cell(r: dict) -> str:
    long = r.get("long")
    return "" if not long else f"{long['max_diff']:.1e} ({long['length']} tokens)"


def _long_totals(results: dict) -> list[str]:
    """The long check's tally: how many converted types it ran on, and those over the tolerance."""
    ran = {t: r["long"] for t, r in results.items() if r.get("long")}
    over = sorted(t for t, long in ran.items() if long["max_diff"] > ATOL)
    if not ran:
        return []
    text = f"Long check: {len(ran) - len(over)} of {len(ran)} converted types within {ATOL:g}"
    if over:
        text += "; over it: " + ", ".join(f"{t} ({ran[t]['max_diff']:.1e})" for t in over)
    return [text + ".", ""]


def _genai_totals(results: dict) -> list[str]:
    """The genai column's tally, over the types it ran on (those with a cache)."""
    ran = {t: r["genai"] for t, r in results.items() if r.get("genai")}
    if not ran:
        return []
    same = sorted(t for t, g in ran.items() if g == "same")
    none = sorted(t for t, g in ran.items() if g == "no config")
    other = sorted(t for t in ran if t not in same and t not in none)
    text = (
        f"onnxruntime-genai (greedy, {len(ran)} types with a cache checked): {len(same)} give "
        f"onnxruntime's tokens; {len(none)} get no `genai_config.json` (recurrent states or "
        "unequal key/value shapes)"
    )
    if other:
        text += "; " + ", ".join(f"{t} ({ran[t]})" for t in other)
    rerun = sorted(t for t in ran if results[t].get("genai_date"))
    if rerun:
        dates = sorted({results[t]["genai_date"] for t in rerun})
        text += (
            f". The genai column of {len(rerun)} of them was re-run alone on the code of "
            f"{', '.join(dates)} (`coverage.py --genai-only`; their other columns are from the run "
            f"above): {', '.join(rerun)}"
        )
    return [text + ".", ""]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _reruns() -> list[str]:
    """A section per sweep (or re-run of some types) on another release (``coverage_transformers_*.json``,
    kept apart so that the table above stays one run)."""
    import json

    lines: list[str] = []
    for path in sorted((ROOT / "benchmarks" / "results").glob("coverage_transformers_*.json")):
        data = json.loads(path.read_text())
        meta, results = data["meta"], data["results"]
        counts = {s: sum(r["status"] == s for r in results.values()) for s in STATUSES}
        versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
        lines += [
            "",
            f"## On transformers {meta['versions']['transformers']}",
            "",
            f"{meta.get('scope', 'some types')} ({meta.get('date', '?')}, revision "
            f"{meta.get('revision', '?')}; {versions}; `{path.relative_to(ROOT)}`): "
            + ", ".join(f"{k} {v}" for k, v in counts.items() if v)
            + ".",
            "",
            "| type | status | max diff | error / reason |",
            "|---|---|---|---|",
            *[
                f"| {name} | {r['status']} | {fmt_diff(r)} | {_cell(detail(r))} |"
                for name, r in sorted(results.items())
            ],
        ]
    return lines


def write_report(data: dict) -> None:
    results = data["results"]
    meta = data.get("meta", {})
    counts = {s: sum(r["status"] == s for r in results.values()) for s in STATUSES}
    lines = [
        "# Causal-LM coverage",
        "",
        "Every model type in transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, built tiny "
        "(`mobius.testing.configs.tiny_config_for`: hidden 64, 2 layers, vocab 256, random weights), "
        "converted with `python -m mobius build`, and compared with eager PyTorch at atol "
        f"{ATOL:g} (batch 2, left padding; with a KV cache, a prefill of {PREFILL} tokens then a "
        f"decode step of {LENGTH - PREFILL} tokens on the returned cache; this sets the status). "
        f"The long check does the same with a prefill of {LONG_PREFILL} and "
        f"{LONG_LENGTH - LONG_PREFILL} more (or as long as the model's position table allows) "
        "and is reported next to it, at the same tolerance. Generated by "
        "`benchmarks/coverage.py`; raw results in `benchmarks/results/coverage.json`.",
        "",
        f"Run: {meta.get('date', '?')}, revision {meta.get('revision', '?')}"
        + (" (last run over some types only: the table mixes runs)" if meta.get("partial") else "")
        + "; "
        + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
        + f"; {meta.get('types_total', len(results))} types in the mapping, "
        f"{len(results)} with a result.",
        "",
        "## Totals",
        "",
        "| status | types |",
        "|---|---|",
        *[f"| {s} | {counts[s]} |" for s in STATUSES],
        f"| **total** | **{len(results)}** |",
        "",
        *_long_totals(results),
        *_genai_totals(results),
        "## Failures by class",
        "",
        "Each class with the types it would fix, most types first (a type blocked by several ops "
        "is listed under each op). `pass-no-cache` types are listed under the reason explain "
        "gives for the missing cache.",
        "",
    ]
    for cls, types in grouped(results):
        lines.append(f"- **{_cell(cls)}** ({len(types)}): {', '.join(sorted(types))}")
    known = {
        t: why for t, why in KNOWN_CAUSES.items() if results.get(t, {}).get("status") != "pass"
    }
    known.update(
        {
            t: "long check: " + why
            for t, why in KNOWN_LONG_CAUSES.items()
            if results.get(t, {}).get("long", {}).get("max_diff", 0) > ATOL
        }
    )
    if known:
        lines += ["", "## Known causes", ""]
        lines += [f"- **{t}**: {why}" for t, why in sorted(known.items())]
    lines += _reruns()
    slow = sorted(results.values(), key=lambda r: -r.get("seconds", 0))[:10]
    lines += [
        "",
        "## Slowest types",
        "",
        ", ".join(f"{r['type']} {r.get('seconds', 0):.0f} s" for r in slow),
        "",
        "## Per type",
        "",
        "| type | status | max diff | long check | genai | seconds | error / blocking ops / reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in sorted(results.items()):
        lines.append(
            f"| {name} | {r['status']} | {fmt_diff(r)} | {_long_cell(r)} | "
            f"{_cell(r.get('genai', ''))} | {r.get('seconds', 0):.0f} | {_cell(detail(r))} |"
        )
    # the head tasks' tables (benchmarks/task_coverage_report.py) follow the marker: kept
    kept = REPORT.read_text().partition(HEAD_TASKS_MARKER) if REPORT.exists() else ("", "", "")
    tail = kept[1] + kept[2] if kept[1] else ""
    REPORT.write_text("\n".join(lines) + "\n" + ("\n" + tail if tail else ""))
