"""Re-run the coverage sweeps against a transformers (and diffusers) release, in one command.

The day a release comes out, this says whether ``setup.cfg``'s upper bound can move to it:

    python benchmarks/sweep_release.py                           # the newest releases, every sweep
    python benchmarks/sweep_release.py --transformers 5.25.0 --sweeps causal
    python benchmarks/sweep_release.py --sweeps causal -- --only mamba qwen3_next

It makes a virtual environment per release pair under ``~/.cache/mobius/sweep-venvs`` (the torch
installed here first, as the README's install does, then this checkout editable with its
``testing`` extra and the pinned releases), and runs each sweep script with that environment's
Python. The results land where each sweep writes them (``benchmarks/results/*.json``), with the
versions in ``benchmarks/results/versions.json``. Arguments after ``--`` go to every sweep.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENVS = Path.home() / ".cache" / "mobius" / "sweep-venvs"
SWEEPS = {
    "causal": ["coverage.py"],
    "tasks": ["task_coverage.py", "--json", "benchmarks/results/task_coverage.json", "all"],
    "seq2seq": ["seq2seq_coverage.py"],
    "vlm": ["vlm_coverage.py"],
    "diffusers": ["diffusers_coverage.py"],
}


def newest(package: str) -> str:
    """The newest release of ``package`` that pip would install (``pip index versions``)."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    first = out.splitlines()[0] if out.strip() else ""
    if "(" not in first:
        return _newest_from_pypi(package)
    return first.split("(", 1)[1].split(")", 1)[0]


def _newest_from_pypi(package: str) -> str:
    with urllib.request.urlopen(f"https://pypi.org/pypi/{package}/json", timeout=30) as reply:
        return json.load(reply)["info"]["version"]


def environment(transformers: str, diffusers: str) -> Path:
    """The sweep environment for this release pair, made on first use; its Python."""
    venv = VENVS / f"transformers-{transformers}_diffusers-{diffusers}"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    torch = importlib.metadata.version("torch").split("+")[0]
    print(f"making {venv} (torch {torch})", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, f"torch=={torch}"], check=True)
    subprocess.run(
        [
            *pip,
            "-e",
            f"{ROOT}[testing]",
            f"transformers=={transformers}",
            f"diffusers=={diffusers}",
        ],
        check=True,
    )
    return python


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    passed = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transformers", default="newest", help="a release, or newest")
    parser.add_argument("--diffusers", default="newest", help="a release, or newest")
    parser.add_argument("--sweeps", nargs="+", choices=list(SWEEPS), default=list(SWEEPS))
    args = parser.parse_args(own)
    transformers = newest("transformers") if args.transformers == "newest" else args.transformers
    diffusers = newest("diffusers") if args.diffusers == "newest" else args.diffusers
    python = environment(transformers, diffusers)
    print(f"sweeping on transformers {transformers}, diffusers {diffusers}", flush=True)
    failed = 0
    for sweep in args.sweeps:
        script, *rest = SWEEPS[sweep]
        command = [str(python), str(ROOT / "benchmarks" / script), *rest, *passed]
        print("$", " ".join(command), flush=True)
        failed += subprocess.run(command, cwd=ROOT, check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
