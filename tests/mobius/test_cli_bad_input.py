"""Bad input: a one-line actionable error, exit code 2, and the output path untouched."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mobius.cli import main


@pytest.fixture
def llama_copy(checkpoints, tmp_path) -> Path:
    directory, _, _ = checkpoints.get("llama")
    copy = tmp_path / "ckpt"
    shutil.copytree(directory, copy)
    return copy


def run_cli(capsys, model: Path, output: Path, *extra: str, quiet: bool = True) -> tuple[int, str]:
    capsys.readouterr()  # drop what fixtures printed
    flags = ["-q"] if quiet else []
    code = main(["build", "--model", str(model), "--output", str(output), *flags, *extra])
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


# --- config.json ---------------------------------------------------------------------------


@pytest.fixture
def no_trace(monkeypatch):
    """Fail the test if the model would be built: config errors must come before any allocation."""
    import mobius.synth.chain

    def trace(*args, **kwargs):
        raise AssertionError("the model was built before the config was rejected")

    monkeypatch.setattr(mobius.synth.chain, "trace", trace)


def test_config_not_json(capsys, llama_copy, tmp_path, no_trace):
    (llama_copy / "config.json").write_text('{"model_type": "llama", hidden_size: 64')
    assert_refused(capsys, llama_copy, tmp_path / "out", "config.json is not valid JSON")


def test_config_not_an_object(capsys, llama_copy, tmp_path, no_trace):
    (llama_copy / "config.json").write_text("[1, 2]")
    assert_refused(capsys, llama_copy, tmp_path / "out", "JSON object")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vocab_size", 10**12),
        ("vocab_size", 0),
        ("hidden_size", -64),
        ("hidden_size", 10**9),
        ("num_hidden_layers", 0),
        ("num_attention_heads", -4),
        ("num_key_value_heads", 0),
        ("intermediate_size", -5),
        ("intermediate_size", 0),
        ("intermediate_size", 10**12),
        ("head_dim", 0),
        ("head_dim", 10**9),
        ("max_position_embeddings", 10**15),
        ("max_position_embeddings", -1),
    ],
)
def test_absurd_size_rejected_before_building(capsys, llama_copy, tmp_path, no_trace, field, value):
    _edit_config(llama_copy, **{field: value})
    assert_refused(capsys, llama_copy, tmp_path / "out", f"{field}={value}", "out of range")


@pytest.mark.parametrize("value", ["64", 12.5, True, [64.5], {"a": "x"}])
def test_size_of_wrong_type(capsys, llama_copy, tmp_path, no_trace, value):
    _edit_config(llama_copy, hidden_size=value)
    assert_refused(capsys, llama_copy, tmp_path / "out", "hidden_size", "must be an integer")


def test_size_in_sub_config_is_checked(capsys, llama_copy, tmp_path, no_trace):
    _edit_config(llama_copy, text_config={"vocab_size": 10**12})
    assert_refused(capsys, llama_copy, tmp_path / "out", "text_config.vocab_size")


def test_oversized_matrix_rejected(capsys, llama_copy, tmp_path, no_trace):
    # each field alone is within its limit; their product is not a real model
    _edit_config(llama_copy, vocab_size=9_000_000, hidden_size=65_536, num_attention_heads=64)
    assert_refused(capsys, llama_copy, tmp_path / "out", "embedding", "fix config.json")


def test_heads_do_not_divide_hidden(capsys, llama_copy, tmp_path, no_trace):
    config = json.loads((llama_copy / "config.json").read_text())
    del config["head_dim"]
    config.update(num_attention_heads=5, num_key_value_heads=5)
    (llama_copy / "config.json").write_text(json.dumps(config))
    err = assert_refused(capsys, llama_copy, tmp_path / "out", "64", "(5)", "fix config.json")
    assert "hidden" in err and "heads" in err


def test_kv_heads_do_not_divide_heads(capsys, llama_copy, tmp_path, no_trace):
    _edit_config(llama_copy, num_key_value_heads=3)
    assert_refused(capsys, llama_copy, tmp_path / "out", "num_key_value_heads=3")


def test_missing_model_type(capsys, llama_copy, tmp_path, no_trace):
    config = json.loads((llama_copy / "config.json").read_text())
    del config["model_type"]
    (llama_copy / "config.json").write_text(json.dumps(config))
    assert_refused(capsys, llama_copy, tmp_path / "out", "no 'model_type'", '"llama"')


@pytest.mark.parametrize(("typo", "suggestion"), [("qwen_2", "'qwen2'"), ("mistrall", "'mistral'")])
def test_unknown_model_type_suggestions(capsys, llama_copy, tmp_path, no_trace, typo, suggestion):
    _edit_config(llama_copy, model_type=typo)
    assert_refused(capsys, llama_copy, tmp_path / "out", f"'{typo}'", "did you mean", suggestion)


def test_unknown_model_type_without_close_name(capsys, llama_copy, tmp_path, no_trace):
    _edit_config(llama_copy, model_type="zzzzqqq")
    assert_refused(capsys, llama_copy, tmp_path / "out", "unknown model_type 'zzzzqqq'")


# --- safetensors ---------------------------------------------------------------------------


def _rewrite_header(weights: Path, header_bytes: bytes) -> None:
    data = weights.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    weights.write_bytes(struct.pack("<Q", len(header_bytes)) + header_bytes + data[8 + length :])


def test_header_length_beyond_the_file(capsys, llama_copy, tmp_path, no_trace):
    weights = llama_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(struct.pack("<Q", 10**15) + data[8:])
    assert_refused(capsys, llama_copy, tmp_path / "out", "model.safetensors", "corrupt header")


def test_header_not_json(capsys, llama_copy, tmp_path, no_trace):
    weights = llama_copy / "model.safetensors"
    data = weights.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    weights.write_bytes(data[:8] + b"\xff" * length + data[8 + length :])
    assert_refused(capsys, llama_copy, tmp_path / "out", "model.safetensors", "corrupt header")


def test_header_entry_malformed(capsys, llama_copy, tmp_path, no_trace):
    weights = llama_copy / "model.safetensors"
    with safe_open(weights, "pt") as f:
        keys = list(f.keys())
    data = weights.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header[keys[0]]["shape"] = "sixty-four"
    _rewrite_header(weights, json.dumps(header).encode())
    assert_refused(capsys, llama_copy, tmp_path / "out", keys[0], "corrupt header")


def test_header_unknown_dtype(capsys, llama_copy, tmp_path, no_trace):
    weights = llama_copy / "model.safetensors"
    data = weights.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header["model.norm.weight"]["dtype"] = "F7"
    _rewrite_header(weights, json.dumps(header).encode())
    assert_refused(capsys, llama_copy, tmp_path / "out", "model.norm.weight", "F7")


def test_truncated_in_the_header(capsys, llama_copy, tmp_path, no_trace):
    weights = llama_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5])
    assert_refused(capsys, llama_copy, tmp_path / "out", "model.safetensors", "truncated")


def test_integer_tensor_for_a_float_parameter(capsys, llama_copy, tmp_path):
    state = load_file(llama_copy / "model.safetensors")
    key = "model.layers.0.self_attn.k_proj.weight"
    state[key] = torch.ones_like(state[key], dtype=torch.int32)
    save_file(state, llama_copy / "model.safetensors", metadata={"format": "pt"})
    assert_refused(capsys, llama_copy, tmp_path / "out", key, "int32", "floating-point")


def test_extra_tensors_are_listed_and_build_succeeds(capsys, caplog, llama_copy, tmp_path):
    state = load_file(llama_copy / "model.safetensors")
    state["model.extra.bias"] = torch.zeros(3)
    state["unused_head.weight"] = torch.zeros(2, 2)
    save_file(state, llama_copy / "model.safetensors", metadata={"format": "pt"})
    code, err = run_cli(capsys, llama_copy, tmp_path / "out", quiet=False)
    assert code == 0, err
    assert (tmp_path / "out" / "model.onnx").is_file()
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "2 tensors the model does not use" in warning
    assert "model.extra.bias" in warning and "unused_head.weight" in warning


def test_nan_and_inf_are_warned_about_with_names(capsys, caplog, llama_copy, tmp_path):
    state = load_file(llama_copy / "model.safetensors")
    state["model.layers.0.mlp.up_proj.weight"][3, 5] = float("nan")
    state["model.norm.weight"][0] = float("inf")
    save_file(state, llama_copy / "model.safetensors", metadata={"format": "pt"})
    code, err = run_cli(capsys, llama_copy, tmp_path / "out", quiet=False)
    assert code == 0, err
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "NaN or Inf" in warning
    assert "model.layers.0.mlp.up_proj.weight" in warning and "model.norm.weight" in warning
    assert "model.layers.1.mlp.up_proj.weight" not in warning


def test_nan_listed_on_the_package(llama_copy, tmp_path):
    import mobius

    state = load_file(llama_copy / "model.safetensors")
    state["model.embed_tokens.weight"][1, 1] = float("-inf")
    save_file(state, llama_copy / "model.safetensors", metadata={"format": "pt"})
    package = mobius.build(llama_copy)
    package.save(tmp_path / "out")
    assert package.nonfinite == ["model.embed_tokens.weight"]


def test_index_names_a_missing_shard(capsys, checkpoints, tmp_path, no_trace):
    _, model, _ = checkpoints.get("llama")
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    shard = sorted(sharded.glob("model-*.safetensors"))[1]
    shard.unlink()
    assert_refused(capsys, sharded, tmp_path / "out", shard.name, "missing")


def test_index_without_weight_map(capsys, llama_copy, tmp_path, no_trace):
    (llama_copy / "model.safetensors.index.json").write_text('{"metadata": {}}')
    assert_refused(capsys, llama_copy, tmp_path / "out", "weight_map")


def test_index_pointing_outside_the_checkpoint(capsys, llama_copy, tmp_path, no_trace):
    index = {"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}}
    (llama_copy / "model.safetensors.index.json").write_text(json.dumps(index))
    assert_refused(capsys, llama_copy, tmp_path / "out", "outside")


@pytest.mark.parametrize("name", ["consolidated.00.pth", "model.ckpt"])
def test_other_pickle_files_are_refused(capsys, llama_copy, tmp_path, no_trace, name):
    (llama_copy / "model.safetensors").rename(llama_copy / name)
    assert_refused(capsys, llama_copy, tmp_path / "out", name, "pickle", "save_pretrained")


def test_remote_code_names_every_module(capsys, llama_copy, tmp_path, no_trace):
    auto_map = {
        "AutoConfig": "configuration_mine.MineConfig",
        "AutoModelForCausalLM": "someone/repo--modeling_mine.MineForCausalLM",
    }
    _edit_config(llama_copy, model_type="llama", auto_map=auto_map)
    assert_refused(
        capsys,
        llama_copy,
        tmp_path / "out",
        "configuration_mine.py",
        "modeling_mine.py",
        "--trust-remote-code",
    )


# --- output path ---------------------------------------------------------------------------


def test_output_under_a_regular_file(capsys, llama_copy, tmp_path):
    blocker = tmp_path / "some_file"
    blocker.write_text("not a directory")
    err = assert_refused(capsys, llama_copy, blocker / "out", "some_file", "not a directory")
    assert "--output" in err
    assert blocker.read_text() == "not a directory"


def test_output_is_an_existing_file(capsys, llama_copy, tmp_path):
    out = tmp_path / "model.onnx"
    out.write_text("mine")
    code, err = run_cli(capsys, llama_copy, out)
    assert code == 2 and err.startswith("mobius: error: ") and "is a file" in err
    assert out.read_text() == "mine"


def test_output_on_a_read_only_file_system(capsys, llama_copy):
    # /proc refuses new directories even to root (os.access would say yes)
    out = Path("/proc/mobius-out")
    code, err = run_cli(capsys, llama_copy, out)
    assert code == 2, err
    assert err.startswith("mobius: error: cannot write to /proc") and "--output" in err
    assert len(err.splitlines()) == 1
    assert not out.exists()


def test_overwrite_replaces_a_non_empty_output(capsys, llama_copy, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    code, err = run_cli(capsys, llama_copy, out, "--overwrite")
    assert code == 0, err
    assert (out / "model.onnx").is_file() and not (out / "keep.txt").exists()
    assert not list(tmp_path.glob(".out*")), "temporary debris left behind"
