"""The tables ``convert.py`` writes into docs/benchmarks.md, between two marker lines.

Everything between ``BEGIN`` and ``END`` is replaced (the markers are appended at the end of the
file the first time); the rest of the page is left as it is.
"""

from __future__ import annotations

import statistics
from pathlib import Path

BEGIN = "<!-- convert.py tables: begin (generated, do not edit by hand) -->"
END = "<!-- convert.py tables: end -->"
MiB = 1024 * 1024
NAMES = {
    "mobius": "mobius",
    "mobius-base": "mobius before issue 17 (1e85dc8)",
    "ort-genai-builder": "onnxruntime-genai builder",
    "cp": "`cp -r` (the checkpoint's bytes)",
    "torch-dynamo": "torch.onnx.export(dynamo=True)",
    "transformers-exporters": "transformers.exporters",
}
PHASES = ("import", "trace", "emit", "write")


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if "error" not in r and key in r]
    return statistics.median(values) if values else None


def _spread(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs if "error" not in r and key in r]
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.1f}"
    return f"{med:.1f} ({min(values):.1f}–{max(values):.1f})"


def _name(entry: dict, exporter: str) -> str:
    """The exporter's name in the tables; ``mobius-base`` as recorded with its run."""
    record = entry["exporters"][exporter]
    if exporter == "mobius-base" and record.get("label"):
        return record["label"]
    cap = record.get("address_space_cap_bytes")
    if cap:
        return f"{NAMES.get(exporter, exporter)} (under `prlimit --as={cap / 2**30:g} GiB`)"
    return NAMES.get(exporter, exporter)


def model_table(name: str, entry: dict) -> list[str]:
    exporters = entry["exporters"]
    builder = _median(exporters.get("ort-genai-builder", {}).get("runs", []), "wall_s")
    cp = _median(exporters.get("cp", {}).get("runs", []), "wall_s")
    size = entry["checkpoint_bytes"] / MiB
    largest = entry["largest_tensor_bytes"] / MiB
    lines = [
        f"### {name} (checkpoint {size:.0f} MiB, largest tensor {largest:.0f} MiB; "
        f"mobius `--dtype {entry.get('mobius_dtype', 'f32')}`)",
        "",
        "| exporter | runs | wall s | CPU s | peak RSS MiB | load | ÷ builder | ÷ cp |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for exporter, rec in exporters.items():
        runs = rec.get("runs", [])
        ok = [r for r in runs if "error" not in r]
        if not ok:
            error = (rec.get("error") or "no runs").strip().splitlines()[-1][:120]
            lines.append(f"| {_name(entry, exporter)} | {len(runs)} | failed: {error} |")
            continue
        wall = _median(runs, "wall_s")
        rss = _median(runs, "peak_rss_bytes")
        loads = [r["load_1min_before"] for r in ok]
        ratio_b = f"{wall / builder:.2f}×" if builder and exporter != "ort-genai-builder" else "—"
        ratio_cp = f"{wall / cp:.2f}×" if cp and exporter != "cp" else "—"
        lines.append(
            f"| {_name(entry, exporter)} | {len(ok)} | {_spread(runs, 'wall_s')} | "
            f"{_spread(runs, 'cpu_s')} | {rss / MiB:.0f} | {min(loads):.1f}–{max(loads):.1f} | "
            f"{ratio_b} | {ratio_cp} |"
        )
    phases = entry.get("phases")
    if phases and "phases" in phases:
        cells = [
            f"{phases['phases'][p]['wall_s']:.1f} / {phases['phases'][p]['cpu_s']:.1f}"
            for p in PHASES
        ]
        total = phases["total"]
        lines += [
            "",
            "mobius phase split, one in-process run (`benchmarks/convert_phases.py`), wall / CPU s:",
            "",
            "| import | trace | emit | write | total | peak RSS MiB | load |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            f"| {' | '.join(cells)} | {total['wall_s']:.1f} / {total['cpu_s']:.1f} | "
            f"{phases['peak_rss_bytes'] / MiB:.0f} | {phases.get('load_1min', 0):.1f} |",
        ]
    return lines


def render(result: dict, raw: str = "benchmarks/results/convert.json") -> str:
    machine = result.get("machine", {})
    lines = [
        BEGIN,
        "",
        f"## Conversion speed (issue 17), measured {result.get('date', '?')}",
        "",
        f"`python benchmarks/convert.py` on {machine.get('cpu_count', '?')} CPUs "
        f"({machine.get('cpu', '?')}); exporters alternate inside each repeat; median "
        "(min–max) over the runs. CPU is user + system seconds of the process tree. Raw data: "
        f"`{raw}`. The machine is shared: read the load column, and "
        "the ratios rather than the seconds.",
        "",
    ]
    for name, entry in result.get("models", {}).items():
        if "exporters" in entry and entry.get("mobius_dtype"):
            lines += model_table(name, entry) + [""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write(result: dict, docs: Path, raw: Path | None = None) -> None:
    text = docs.read_text(encoding="utf-8") if docs.is_file() else ""
    shown = (
        f"benchmarks/results/{raw.name}" if raw is not None else "benchmarks/results/convert.json"
    )
    block = render(result, shown)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block
    docs.write_text(text, encoding="utf-8")
