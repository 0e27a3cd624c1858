"""``mobius verify`` on SmolLM2-135M's real weights (its Q4_1 GGUF file dequantized into a float32
checkpoint, ``mobius.testing.gguf.checkpoint_from_gguf``), converted in f32, f16 and int4: each
within its tolerance, on a prompt."""

from __future__ import annotations

import json

import pytest

import mobius
from mobius.cli import main
from mobius.testing.gguf import checkpoint_from_gguf, smollm2_gguf

# a sweep check: verify's three precisions are checked on tiny models in CI (test_causal.py)
pytestmark = [pytest.mark.slow, pytest.mark.sweep]
PROMPT = "The capital of France is Paris. The capital of Germany is"


OPTIONS = {"f32": {}, "f16": {"dtype": "f16"}, "int4": {"precision": "int4"}}


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """(checkpoint, precision -> package built on first use), for this module."""
    root = tmp_path_factory.mktemp("verify_smollm2")
    checkpoint = checkpoint_from_gguf(smollm2_gguf(), root / "hf")
    built: dict = {}

    def package(precision: str):
        if precision not in built:
            built[precision] = mobius.build(checkpoint, **OPTIONS[precision]).save(root / precision)
        return built[precision]

    return checkpoint, package


@pytest.mark.parametrize("precision", ["f32", "f16", "int4"])
def test_smollm2_within_tolerance(smollm2, precision, capsys, tmp_path):
    checkpoint, package = smollm2
    path = tmp_path / "report.json"
    args = ["verify", "--model", str(checkpoint), "--onnx", str(package(precision))]
    code = main([*args, "--prompt", PROMPT, "--new-tokens", "6", "--json", str(path)])
    assert code == 0, capsys.readouterr().out
    report = json.loads(path.read_text())
    judged = [o for o in report["outputs"] if o["judged"]]
    bound = 1e-2 if precision == "f16" else 1e-4  # relative to the largest logit
    assert all(o["max_rel"] <= bound and o["argmax"] == 1.0 for o in judged)
