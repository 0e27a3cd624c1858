"""``mobius --version``: mobius's and its libraries' versions, one a line."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_version_prints_every_library():
    done = subprocess.run(
        [sys.executable, "-m", "mobius", "--version"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and not done.stderr
    found = dict(line.split() for line in done.stdout.splitlines())
    assert found["mobius"] == __import__("mobius").__version__
    for name in ("torch", "transformers", "onnx", "onnxscript", "onnxruntime"):
        assert found[name] == importlib.metadata.version(name)
