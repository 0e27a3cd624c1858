"""``mobius verify`` on a causal LM (the bundled tiny Llama, with its tokenizer): f32 through
``build --verify``, f16 and int4; a package with one weight changed in its external data exits 1;
inputs verify cannot use exit 2 with one line; ``--json`` writes the numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import external_data_helper, numpy_helper

from mobius.cli import main

TINY_LLAMA = Path(__file__).resolve().parents[3] / "examples" / "tiny-llama"


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """name -> package directory of the tiny Llama: f32 (written by ``build --verify``), f16,
    int4, and int4 for ``--ep cpu`` (GroupQueryAttention, packed q/k/v, int8 activations);
    built once for this module. ``built`` holds what ``build --verify`` printed."""
    root = tmp_path_factory.mktemp("verify")
    out = {}
    for name, flags in {
        "f32": [],
        "f16": ["--dtype", "f16"],
        "int4": ["--precision", "int4"],
        "cpu-int4": ["--ep", "cpu", "--precision", "int4"],
    }.items():
        out[name] = root / name
        command = ["build", "--model", str(TINY_LLAMA), "--output", str(out[name]), "-q", *flags]
        if name == "f32":
            command.append("--verify")
        assert main(command) == 0, name
    return out


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["verify", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_build_verify_writes_and_passes(packages, capsys):
    assert (packages["f32"] / "model.onnx").is_file()
    code, out, _ = run(capsys, "--model", str(TINY_LLAMA), "--onnx", str(packages["f32"]))
    assert code == 0
    assert "logits  prefill" in out and "logits  cached step" in out
    assert "greedy tokens (model.onnx, 2 rows x 8): equal" in out
    assert out.rstrip().endswith("PASS: 2 outputs within tolerance")


def test_a_gguf_source_is_verified_against_its_dequantized_weights(tmp_path, capsys):
    """``verify --model FILE.gguf``: the reference is transformers' dequantization of the file
    (quantized blocks included), the package the one ``build-gguf`` wrote."""
    from mobius.testing.gguf_files import write_tiny_llama

    gguf_file = write_tiny_llama(tmp_path / "tiny.gguf")
    package = tmp_path / "onnx"
    assert main(["build-gguf", str(gguf_file), "--output", str(package), "-q"]) == 0
    code, out, _ = run(capsys, "--model", str(gguf_file), "--onnx", str(package))
    assert code == 0, out
    assert "logits  prefill" in out and "greedy tokens" in out


def test_json_has_every_number(packages, capsys, tmp_path):
    path = tmp_path / "verify.json"
    code, _, _ = run(
        capsys, "--model", str(TINY_LLAMA), "--onnx", str(packages["f32"]), "--json", str(path)
    )
    report = json.loads(path.read_text())
    assert code == 0 and report["passed"]
    assert report["tolerance"] == {
        "kind": "scaled",
        "precision": "f32",
        "tokens_must_match": True,
        "bound": 1e-4,
    }
    prefill = report["outputs"][0]
    assert (prefill["graph"], prefill["output"], prefill["call"]) == (
        "model.onnx",
        "logits",
        "prefill",
    )
    assert 0 < prefill["max_abs"] < 1e-4 and prefill["max_rel"] < 1e-5
    assert prefill["argmax"] == 1.0 and prefill["passed"]
    assert report["tokens"][0]["equal"]


def test_prompt_makes_a_padded_batch_of_two(packages, capsys):
    code, out, _ = run(
        capsys,
        "--model", str(TINY_LLAMA), "--onnx", str(packages["f32"]),
        "--prompt", "The quick brown fox jumps over the lazy dog", "--new-tokens", "4",
    )  # fmt: skip
    assert code == 0, out
    assert "left-padded" in out and "2 rows x 4" in out


def test_f16_is_held_to_the_half_precision_bound(packages, capsys):
    code, out, _ = run(capsys, "--model", str(TINY_LLAMA), "--onnx", str(packages["f16"]))
    assert code == 0, out
    assert "package f16, PyTorch f32" in out
    assert "tolerance: f16: max |diff| <= 0.01 x max(1, max |PyTorch|)" in out


def test_int4_matches_its_own_quantized_weights(packages, capsys, tmp_path):
    path = tmp_path / "int4.json"
    code, out, _ = run(
        capsys, "--model", str(TINY_LLAMA), "--onnx", str(packages["int4"]), "--json", str(path)
    )
    assert code == 0, out
    report = json.loads(path.read_text())
    informative = [o for o in report["outputs"] if not o["judged"]]
    judged = [o for o in report["outputs"] if o["judged"]]
    assert len(informative) == len(judged) == 2
    assert all("float weights" in o["note"] for o in informative)
    # the graph computes what its int4 weights say, to float32 rounding; the float weights'
    # logits are further off (what round-to-nearest at 4 bits costs)
    assert all(o["max_rel"] < 1e-5 for o in judged)
    assert min(o["max_abs"] for o in informative) > 100 * max(o["max_abs"] for o in judged)


def test_cpu_int4_packed_projections_and_int8_activations(packages, capsys, tmp_path):
    """--ep cpu: q/k/v packed into one MatMulNBits (their weights reproduced one by one), int8
    activations (accuracy_level 4: judged by top-1 agreement), GroupQueryAttention (a cached
    step of one token: it takes several only in a batch of one)."""
    path = tmp_path / "cpu.json"
    code, out, _ = run(
        capsys, "--model", str(TINY_LLAMA), "--onnx", str(packages["cpu-int4"]), "--json", str(path)
    )
    assert code == 0, out
    report = json.loads(path.read_text())
    assert (
        report["tolerance"]["kind"] == "top-1"
        and report["tolerance"]["precision"] == "int8 activations"
    )
    judged = [o for o in report["outputs"] if o["judged"]]
    assert [o["shape"][1] for o in judged] == [8, 1]
    assert all(o["note"] == "the package's quantized weights, dequantized" for o in judged)


def perturbed(package: Path, target: Path) -> Path:
    """A copy of ``package`` with one layer's MLP weight scaled by 1.05 in place in its external
    data (found and rewritten with the onnx API; the graph file is unchanged)."""
    shutil.copytree(package, target)
    model = onnx.load(str(target / "model.onnx"), load_external_data=False)
    weight = next(
        t
        for t in model.graph.initializer
        if "layers.1.mlp.down_proj" in t.name and external_data_helper.uses_external_data(t)
    )
    info = external_data_helper.ExternalDataInfo(weight)
    external_data_helper.load_external_data_for_tensor(weight, str(target))
    values = numpy_helper.to_array(weight)
    changed = (
        (values.astype(np.float32) * 1.05).astype(values.dtype)
        if values.dtype.kind == "f"
        else values ^ 0x11
    )
    with open(target / info.location, "r+b") as data:
        data.seek(info.offset)
        data.write(changed.tobytes())
    return target


@pytest.mark.parametrize("precision", ["f32", "int4"])
def test_a_perturbed_weight_exits_1(packages, capsys, tmp_path, precision):
    broken = perturbed(packages[precision], tmp_path / "broken")
    code, out, _ = run(capsys, "--model", str(TINY_LLAMA), "--onnx", str(broken))
    assert code == 1, out
    assert "FAIL: outside tolerance: model.onnx logits (prefill)" in out


def one_line_error(capsys, *args: str) -> str:
    code, out, err = run(capsys, *args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mobius: error: "), err
    return lines[0]


def test_cannot_run_exits_2_with_one_line(packages, capsys, tmp_path, monkeypatch):
    model, onnx_dir = str(TINY_LLAMA), str(packages["f32"])
    missing = one_line_error(capsys, "--model", model, "--onnx", str(tmp_path / "none"))
    assert "does not exist; pass the output directory of mobius build" in missing
    no_image = one_line_error(capsys, "--model", model, "--onnx", onnx_dir, "--image", "x.png")
    assert "--image x.png: no such file" in no_image
    # a checkpoint without tokenizer files cannot make --prompt's ids
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(TINY_LLAMA / name, bare / name)
    shutil.copytree(packages["f32"], tmp_path / "bare_onnx")
    for path in (tmp_path / "bare_onnx").glob("tokenizer*"):
        path.unlink()
    no_tokenizer = one_line_error(
        capsys, "--model", str(bare), "--onnx", str(tmp_path / "bare_onnx"), "--prompt", "hi there"
    )
    assert "no tokenizer found" in no_tokenizer
    # a graph onnxruntime cannot load
    corrupt = tmp_path / "corrupt"
    shutil.copytree(packages["f32"], corrupt)
    (corrupt / "model.onnx").write_bytes(b"not a model")
    assert "onnxruntime cannot load" in one_line_error(
        capsys, "--model", model, "--onnx", str(corrupt)
    )
    # not enough memory for the PyTorch model and the package together
    monkeypatch.setattr("mobius.verification.memory.available_bytes", lambda: 1 << 20)
    refused = one_line_error(capsys, "--model", model, "--onnx", onnx_dir)
    assert "verify needs about" in refused and "is available" in refused


def test_python_api_returns_the_report(packages):
    import mobius

    report = mobius.verify(TINY_LLAMA, packages["f32"], new_tokens=0)
    assert report.exit_code == 0 and not report.tokens
    assert [o.call for o in report.outputs] == ["prefill", "cached step"]
    assert np.isfinite([o.max_abs for o in report.outputs]).all()
