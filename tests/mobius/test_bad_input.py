"""Bad input: a one-line actionable error, exit code 2, and the output path untouched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mobius.cli import main


@pytest.fixture
def llama_copy(checkpoints, tmp_path) -> Path:
    directory, _, _ = checkpoints.get("llama")
    copy = tmp_path / "ckpt"
    shutil.copytree(directory, copy)
    return copy


def run_cli(capsys, model: Path, output: Path, *extra: str) -> tuple[int, str]:
    capsys.readouterr()  # drop what fixtures printed
    code = main(["build", "--model", str(model), "--output", str(output), "-q", *extra])
    err = capsys.readouterr().err.strip()
    return code, err


def assert_refused(
    capsys, model: Path, output: Path, *words: str, extra: tuple[str, ...] = ()
) -> str:
    code, err = run_cli(capsys, model, output, *extra)
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("mobius: error: ")
    for word in words:
        assert word in err, err
    assert not output.exists()
    assert not list(output.parent.glob(f".{output.name}*")), "temporary debris left behind"
    return err


def _edit_config(directory: Path, **changes) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_missing_config(capsys, llama_copy, tmp_path):
    (llama_copy / "config.json").unlink()
    assert_refused(capsys, llama_copy, tmp_path / "out", "no config.json")


def test_unknown_model_type_suggests_close_names(capsys, llama_copy, tmp_path):
    _edit_config(llama_copy, model_type="lama")
    assert_refused(capsys, llama_copy, tmp_path / "out", "unknown model_type 'lama'", "'llama'")


def test_shape_mismatch_with_config(capsys, llama_copy, tmp_path):
    _edit_config(llama_copy, intermediate_size=96)
    assert_refused(capsys, llama_copy, tmp_path / "out", "mlp", "shape", "[128, 64]", "[96, 64]")


def test_truncated_safetensors(capsys, llama_copy, tmp_path):
    weights = llama_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    assert_refused(capsys, llama_copy, tmp_path / "out", "model.safetensors", "truncated")


def test_pickle_only_weights_are_refused(capsys, llama_copy, tmp_path):
    state = load_file(llama_copy / "model.safetensors")
    (llama_copy / "model.safetensors").unlink()
    torch.save(state, llama_copy / "pytorch_model.bin")
    assert_refused(
        capsys, llama_copy, tmp_path / "out", "pytorch_model.bin", "pickle", "save_pretrained"
    )


def test_remote_code_needs_flag(capsys, llama_copy, tmp_path):
    _edit_config(llama_copy, auto_map={"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"})
    assert_refused(
        capsys, llama_copy, tmp_path / "out", "modeling_custom.py", "--trust-remote-code"
    )


def test_missing_tensor(capsys, llama_copy, tmp_path):
    state = load_file(llama_copy / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, llama_copy / "model.safetensors", metadata={"format": "pt"})
    assert_refused(capsys, llama_copy, tmp_path / "out", "model.layers.1.mlp.up_proj.weight")


def test_existing_output_is_left_untouched(capsys, llama_copy, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, err = run_cli(capsys, llama_copy, out)
    assert code == 2 and "--overwrite" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_bad_input_leaves_existing_output_untouched_even_with_overwrite(
    capsys, llama_copy, tmp_path
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (llama_copy / "config.json").unlink()
    code, _ = run_cli(capsys, llama_copy, out, "--overwrite")
    assert code == 2
    assert (out / "keep.txt").read_text() == "mine"


def test_unreachable_hub_id_names_the_id(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = assert_refused(
        capsys, Path("someone/no-such-model"), tmp_path / "out", "someone/no-such-model", "local"
    )
    assert "directory" in err
