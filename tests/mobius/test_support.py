"""``mobius list``, ``mobius info`` (the shipped support table, checked against docs/coverage.md
and against the sweep results it is generated from), ``mobius --version``, and verify's rules
(tolerances, the numbers of one output, the dequantized weights of a quantized package)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mobius.cli import main
from mobius.support import table
from mobius.testing.pairs import Pair
from mobius.verification.compare import check_output
from mobius.verification.tolerance import tolerance_for

ROOT = Path(__file__).resolve().parents[2]
COVERAGE = (ROOT / "docs" / "coverage.md").read_text()


def docs_row(heading: str, first_cell: str) -> list[str]:
    """The cells of the row for ``first_cell`` in the first table after ``heading``."""
    section = COVERAGE[COVERAGE.index(heading) :]
    match = re.search(rf"^\| {re.escape(first_cell)} \|(.*)\|$", section, re.M)
    assert match, (heading, first_cell)
    return [c.strip() for c in match.group(1).split("|")]


# (model type, task, heading of its docs/coverage.md table)
DOCUMENTED = [
    ("llama", "text-generation", "# Causal-LM coverage"),
    ("bert", "fill-mask", "## fill-mask"),
    ("t5", "text2text-generation", "# Encoder–decoder coverage"),
    ("xlstm", "text-generation", "# Causal-LM coverage"),
    ("UNet2DConditionModel", "diffusers", "# Diffusers model classes"),
]


@pytest.mark.parametrize(("model_type", "task", "heading"), DOCUMENTED)
def test_info_agrees_with_the_coverage_docs(model_type, task, heading, capsys):
    assert main(["info", model_type]) == 0
    out = capsys.readouterr().out
    [result] = [r for r in table.results(model_type) if r.task == task]
    cells = docs_row(heading, model_type)
    assert cells[0] == result.status
    diff = f"{result.max_diff:.1e}"
    assert diff in cells[1] or diff in cells[2]  # the diffusers table has a graphs column first
    assert re.search(rf"{re.escape(task)}\s+{result.status}, max diff {diff}", out)


def test_info_says_why_a_type_fails_and_for_which_transformers(capsys, monkeypatch):
    monkeypatch.setattr("mobius.versions.version_of", lambda name: "9.9.9")
    assert main(["info", "mllama"]) == 0
    out = capsys.readouterr().out
    assert "image-text-to-text  convert-error" in out and "known limits:" in out
    assert "cross-attends to the image's states" in out
    made = table.made_with()["transformers"]
    assert f"Note: the table was made with transformers {made}; 9.9.9 is installed" in out


def test_vlm_types_listed_as_passing_in_the_docs():
    passing = COVERAGE[COVERAGE.index("# Vision–language models") :].split("pass all four checks")[
        1
    ]
    for model_type in ("llava", "qwen2_vl", "gemma3"):
        assert f" {model_type}," in passing.split("Ninth session")[0]
        assert table.results(model_type)[0].status == "pass"


def test_unknown_type_and_task_exit_2(capsys):
    assert main(["info", "lama"]) == 2
    assert "did you mean llama" in capsys.readouterr().err
    assert main(["list", "--task", "nope"]) == 2
    assert "no task 'nope' in the support table" in capsys.readouterr().err


def test_list_by_task(capsys):
    assert main(["list", "--task", "causal-lm"]) == 0  # an alias of text-generation
    out = capsys.readouterr().out
    assert re.search(r"^llama\s+pass, max diff", out, re.M)
    assert not re.search(r"^blt\s", out, re.M)  # timed out: only with --all
    assert main(["list", "--task", "text-generation", "--all"]) == 0
    assert re.search(r"^blt\s+timeout", capsys.readouterr().out, re.M)


def test_table_is_generated_from_the_results():
    """``mobius/support/table.json`` is what ``benchmarks/support_table.py`` makes of the
    sweeps' results now (rerun it after a sweep)."""
    done = subprocess.run(
        [sys.executable, "benchmarks/support_table.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_version_prints_every_library():
    done = subprocess.run(
        [sys.executable, "-m", "mobius", "--version"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and not done.stderr
    found = dict(line.split() for line in done.stdout.splitlines())
    assert found["mobius"] == __import__("mobius").__version__
    for name in ("torch", "transformers", "onnx", "onnxscript", "onnxruntime"):
        assert found[name] == importlib.metadata.version(name)


def test_tolerance_by_precision():
    assert tolerance_for("f32", "f32").bound == 1e-4
    assert tolerance_for("f16", "f32").precision == "f16"
    assert tolerance_for("f32", "bf16").precision == "bf16"  # the coarser of the two
    assert tolerance_for("f32", "f32", "int4").kind == "scaled"  # against its own weights
    assert tolerance_for("f32", "f32", "int4", float_weights=True).kind == "top-1"
    assert tolerance_for("f32", "f32", int8_activations=True).kind == "top-1"


def test_numbers_of_one_output():
    expected = np.array([[[1.0, 3.0, 2.0], [5.0, 0.0, 1.0]]], dtype=np.float32)
    actual = expected + np.array([[[0.0, 0.0, 2.5], [0.0, 0.0, 0.0]]], dtype=np.float32)
    check = check_output(
        Pair("model.onnx", "logits", "", actual, expected, scores=True), tolerance_for("f32", "f32")
    )
    assert check.max_abs == 2.5 and check.max_rel == 0.5 and check.argmax == 0.5
    assert not check.passed and check.limit == "<= 5.0e-04"
    keep = np.array([[False, True]])
    check = check_output(
        Pair("model.onnx", "logits", "", actual, expected, keep, True), tolerance_for("f32", "f32")
    )
    assert check.passed and check.max_abs == 0 and check.rows == 1
    nan = check_output(
        Pair("m.onnx", "x", "", expected * np.nan, expected), tolerance_for("f32", "f32")
    )
    assert not nan.passed


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [False, True])
def test_dequantized_weights_are_what_matmulnbits_reads(bits, symmetric):
    """``quantized.dequantize`` gives the weight onnxruntime's MatMulNBits multiplies by (an
    identity input reads it back), K not a whole number of blocks."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from mobius.blockquant import Scheme, quantize
    from mobius.verification.quantized import dequantize

    n, k = 6, 80
    weight = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32)
    scheme = Scheme(bits, 32, symmetric)
    packed = quantize(weight, scheme)
    parts = {"B": packed.b, "scales": packed.scales}
    if packed.zero_points is not None:
        parts["zero_points"] = packed.zero_points
    node = helper.make_node(
        "MatMulNBits", ["A", *parts], ["Y"], domain="com.microsoft", K=k, N=n, bits=bits,
        block_size=32,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [k, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [k, n])],
        [numpy_helper.from_array(v, name) for name, v in parts.items()],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    read_back = session.run(None, {"A": np.eye(k, dtype=np.float32)})[0].T
    np.testing.assert_allclose(dequantize(packed, scheme, (n, k)), read_back, atol=1e-6)
