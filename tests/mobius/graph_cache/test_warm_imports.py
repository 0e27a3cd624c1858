"""A cache hit that writes weights as they are stored does not import torch: the recipes, the
checkpoint headers and the copy and transpose paths are numpy and onnx_ir only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mobius.cli import main
from tests.mobius.graph_cache.conftest import assert_same_package

HIT = """
import sys
from mobius.cli import main
status = main(sys.argv[1:])
imported = sorted(m for m in ("torch", "transformers", "onnxscript") if m in sys.modules)
print("imported:", ",".join(imported))
sys.exit(status)
"""


def test_a_warm_f32_build_imports_no_torch(cache, tmp_path):
    from mobius.testing.tiny import make_checkpoint

    a, b = tmp_path / "a", tmp_path / "b"
    make_checkpoint("llama", a, seed=0)
    make_checkpoint("llama", b, seed=1)
    assert main(["build", "--model", str(a), "--output", str(tmp_path / "out-a"), "-q"]) == 0
    cold = tmp_path / "cold"
    assert main(["build", "--model", str(b), "--output", str(cold), "-q", "--no-cache"]) == 0
    warm = tmp_path / "warm"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    run = subprocess.run(
        [sys.executable, "-c", HIT, "build", "--model", str(b), "--output", str(warm), "-q"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "imported: \n" in run.stdout, run.stdout
    assert_same_package(cold, warm)
