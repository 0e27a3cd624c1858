"""Op-by-op conversion of tiny random-weight models matches eager PyTorch (atol 1e-4)."""

from __future__ import annotations

import pytest

import mobius
from mobius.cli import main
from mobius.testing.parity import max_abs_diff

FAMILIES = [
    "llama", "qwen2", "mistral", "phi3", "gemma", "gemma2", "gpt2", "gpt_neox",
    "opt", "falcon", "bloom", "phi", "bert", "roberta", "vit",
]  # fmt: skip
# the CLI's own path (arguments, saving) once per input kind; the other families run with
# ``-m sweep`` (their conversion is the API's, checked above)
CLI_FAMILIES = {"llama", "bert", "vit"}
ATOL = 1e-4


@pytest.mark.parametrize("model_type", FAMILIES)
def test_api_build_matches_torch(model_type, checkpoints, tmp_path):
    directory, model, config = checkpoints.get(model_type)
    package = mobius.build(directory)
    out = package.save(tmp_path / "onnx")
    assert (out / "model.onnx").is_file() and (out / "model.onnx.data").is_file()
    assert max_abs_diff(model, out, config) <= ATOL


@pytest.mark.parametrize(
    "model_type",
    [t if t in CLI_FAMILIES else pytest.param(t, marks=pytest.mark.sweep) for t in FAMILIES],
)
def test_cli_build_matches_torch(model_type, checkpoints, tmp_path):
    directory, model, config = checkpoints.get(model_type)
    out = tmp_path / "onnx"
    assert main(["build", "--model", str(directory), "--output", str(out), "-q"]) == 0
    assert max_abs_diff(model, out, config) <= ATOL
