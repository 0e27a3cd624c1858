"""Reproducible output: the same input and options give byte-identical files."""

from __future__ import annotations

import os
import subprocess
import sys


def test_two_builds_are_byte_identical(checkpoints, tmp_path):
    directory, _, _ = checkpoints.get("llama")
    outputs = []
    for seed in ("1", "2"):  # different hash seeds: no dependence on set or dict-of-set order
        out = tmp_path / f"out{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        cmd = [sys.executable, "-m", "mobius", "build", "--model", str(directory)]
        subprocess.run([*cmd, "--output", str(out), "-q"], check=True, env=env)
        outputs.append(out)
    first, second = outputs
    for name in ("model.onnx", "model.onnx.data", "mobius.json", "explain.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
