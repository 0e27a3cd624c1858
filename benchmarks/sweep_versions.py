"""The versions a sweep ran with, kept beside its results.

``benchmarks/results/versions.json`` holds, per sweep (``causal``, ``tasks``, ``seq2seq``,
``vlm``, ``diffusers``), the date, the git revision and the package versions of its last run, so
every coverage table can name what it was measured on. ``coverage.json`` also keeps them in its
own ``meta``.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ROOT / "benchmarks" / "results" / "versions.json"
PACKAGES = ("torch", "transformers", "diffusers", "onnx", "onnxscript", "onnx-ir", "onnxruntime")


def revision() -> str:
    """The checkout's commit, with ``+dirty`` when files differ from it."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def current() -> dict[str, str]:
    """Python and the installed versions of the packages a conversion depends on."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def record(sweep: str, partial: bool = False) -> dict:
    """Write this run's date, revision and versions under ``sweep``; ``partial`` for a run over
    some types only (its table then mixes runs)."""
    entry = {
        "date": datetime.date.today().isoformat(),
        "revision": revision(),
        "versions": current(),
        "partial": partial,
    }
    data = json.loads(VERSIONS.read_text()) if VERSIONS.exists() else {}
    data[sweep] = entry
    VERSIONS.parent.mkdir(parents=True, exist_ok=True)
    tmp = VERSIONS.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(VERSIONS)
    return entry
