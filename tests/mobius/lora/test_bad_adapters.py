"""Adapters mobius does not fold, and adapters for another model: ``mobius build --adapter``
refuses each with one line naming the problem, exits 2, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mobius.cli import main
from mobius.testing.lora import write_adapter

LINEARS = ["q_proj", "v_proj"]


def assert_refused(capsys, base: Path, adapter: Path, tmp_path: Path, *words: str) -> str:
    out = tmp_path / "out"
    capsys.readouterr()
    code = main(
        ["build", "--model", str(base), "--adapter", str(adapter), "--output", str(out), "-q"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("mobius: error: "), err
    for word in words:
        assert word in err, err
    assert not out.exists()
    assert not list(tmp_path.glob(".out*")), "temporary debris left behind"
    return err


def _edit_config(adapter: Path, **changes: object) -> Path:
    path = adapter / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return adapter


@pytest.fixture
def llama(checkpoints):
    return checkpoints.get("llama")


@pytest.fixture
def no_trace(monkeypatch):
    """The refusals that need only the adapter come before the model is built."""
    import mobius.synth.chain

    def trace(*args, **kwargs):
        raise AssertionError("the model was built before the adapter was refused")

    monkeypatch.setattr(mobius.synth.chain, "trace", trace)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"use_dora": True}, ["DoRA", "use_dora"]),
        ({"peft_type": "IA3"}, ["IA3", "only LoRA"]),
        ({"lora_bias": True}, ["lora_bias"]),
        ({"target_parameters": ["mlp.experts.gate_up_proj"]}, ["target_parameters"]),
        ({"r": 0}, ["'r'"]),
        ({"lora_alpha": "eight"}, ["'lora_alpha'"]),
    ],
)
def test_config_refused_by_name(capsys, llama, tmp_path, no_trace, change, words):
    base, model, _ = llama
    adapter = _edit_config(write_adapter(model, tmp_path / "adapter", LINEARS), **change)
    assert_refused(capsys, base, adapter, tmp_path, *words)


def test_peft_dora_refused_by_name(capsys, llama, tmp_path, no_trace):
    """A DoRA adapter as PEFT saves it (use_dora, lora_magnitude_vector): refused, naming DoRA."""
    from mobius.testing.peft_adapters import peft_adapter

    base, model, _ = llama
    adapter = peft_adapter(model, tmp_path / "dora", seed=1, target_modules=LINEARS, use_dora=True)
    assert_refused(capsys, base, adapter, tmp_path, "DoRA", "use_dora")


def test_not_an_adapter_directory(capsys, llama, tmp_path, no_trace):
    base, _, _ = llama
    (tmp_path / "empty").mkdir()
    assert_refused(capsys, base, tmp_path / "empty", tmp_path, "adapter_config.json")
    assert_refused(capsys, base, tmp_path / "missing", tmp_path, "does not exist")


def test_pickled_weights_refused(capsys, llama, tmp_path, no_trace):
    base, model, _ = llama
    adapter = write_adapter(model, tmp_path / "adapter", LINEARS)
    (adapter / "adapter_model.safetensors").rename(adapter / "adapter_model.bin")
    assert_refused(
        capsys, base, adapter, tmp_path, "adapter_model.safetensors", "safe_serialization"
    )


def test_corrupt_config_refused(capsys, llama, tmp_path, no_trace):
    base, model, _ = llama
    adapter = write_adapter(model, tmp_path / "adapter", LINEARS)
    (adapter / "adapter_config.json").write_text("{ not json")
    assert_refused(capsys, base, adapter, tmp_path, "not valid JSON")


def _rewrite(adapter: Path, edit) -> Path:
    from safetensors.torch import load_file, save_file

    path = adapter / "adapter_model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))
    return adapter


def test_dora_magnitude_and_missing_factor_refused(capsys, llama, tmp_path, no_trace):
    import torch

    base, model, _ = llama
    key = "base_model.model.model.layers.0.self_attn.q_proj"

    def dora(tensors):
        tensors[f"{key}.lora_magnitude_vector"] = torch.ones(64)

    adapter = _rewrite(write_adapter(model, tmp_path / "a", LINEARS), dora)
    assert_refused(capsys, base, adapter, tmp_path, "lora_magnitude_vector", "DoRA")
    adapter = _rewrite(
        write_adapter(model, tmp_path / "b", LINEARS), lambda t: t.pop(f"{key}.lora_B.weight")
    )
    assert_refused(capsys, base, adapter, tmp_path, "q_proj", "no lora_B")


def test_target_the_base_does_not_have(capsys, checkpoints, llama, tmp_path):
    base, _, _ = llama
    _, gpt2, _ = checkpoints.get("gpt2")
    adapter = write_adapter(gpt2, tmp_path / "adapter", ["c_attn"], fan_in_fan_out=True)
    assert_refused(capsys, base, adapter, tmp_path, "transformer.h.0.attn.c_attn", "another model")


def test_shape_mismatch_names_the_module(capsys, checkpoints, tmp_path):
    """An adapter made for the same architecture at another size: the first module named."""
    from mobius.testing.tiny import make_checkpoint

    base, _, _ = checkpoints.get("llama")
    other, _ = make_checkpoint("llama", tmp_path / "wider", intermediate_size=96)
    adapter = write_adapter(other, tmp_path / "adapter", ["gate_proj"])
    assert_refused(capsys, base, adapter, tmp_path, "model.layers.0.mlp.gate_proj", "[96, 64]")


def test_tied_weight_refused(capsys, checkpoints, tmp_path):
    base, model, _ = checkpoints.get("gpt2")
    adapter = write_adapter(model, tmp_path / "adapter", ["wte"])
    assert_refused(capsys, base, adapter, tmp_path, "transformer.wte.weight", "ties")


# --- mobius adapter: the adapter against a --lora-inputs graph ------------------------------


@pytest.fixture(scope="module")
def served(checkpoints, tmp_path_factory):
    """A llama with LoRA inputs on q_proj and v_proj only."""
    root = tmp_path_factory.mktemp("served")
    base, _, _ = checkpoints.get("llama")
    out = root / "onnx"
    args = ["build", "--model", str(base), "--output", str(out), "-q"]
    assert main([*args, "--lora-inputs", "q_proj,v_proj"]) == 0
    return out


def assert_adapter_refused(capsys, adapter: Path, model: Path, *words: str) -> str:
    before = sorted(p.name for p in model.iterdir()) if model.is_dir() else None
    capsys.readouterr()
    code = main(["adapter", str(adapter), "--model", str(model), "--name", "bad"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("mobius: error: "), err
    for word in words:
        assert word in err, err
    if before is not None:
        assert sorted(p.name for p in model.iterdir()) == before  # nothing written
    return err


def test_adapter_target_without_inputs(capsys, llama, served, tmp_path):
    _, model, _ = llama
    adapter = write_adapter(model, tmp_path / "adapter", ["q_proj", "o_proj"])
    assert_adapter_refused(
        capsys, adapter, served, "model.layers.0.self_attn.o_proj", "--lora-inputs"
    )


def test_adapter_shape_mismatch(capsys, served, tmp_path):
    from mobius.testing.tiny import make_checkpoint

    other, _ = make_checkpoint("llama", tmp_path / "wider", hidden_size=96)
    adapter = write_adapter(other, tmp_path / "adapter", ["q_proj"])
    assert_adapter_refused(capsys, adapter, served, "model.layers.0.self_attn.q_proj", "[64, 64]")


def test_adapter_modules_to_save_and_dora_refused(capsys, llama, served, tmp_path):
    _, model, _ = llama
    adapter = write_adapter(model, tmp_path / "a", ["q_proj"], modules_to_save=["lm_head"])
    assert_adapter_refused(capsys, adapter, served, "lm_head", "modules_to_save", "--adapter")
    adapter = _edit_config(write_adapter(model, tmp_path / "b", ["q_proj"]), use_dora=True)
    assert_adapter_refused(capsys, adapter, served, "DoRA")


def test_adapter_for_a_graph_without_lora_inputs(capsys, llama, tmp_path):
    base, model, _ = llama
    out = tmp_path / "plain"
    assert main(["build", "--model", str(base), "--output", str(out), "-q"]) == 0
    adapter = write_adapter(model, tmp_path / "adapter", ["q_proj"])
    assert_adapter_refused(capsys, adapter, out, "no LoRA inputs", "--lora-inputs")
    assert_adapter_refused(capsys, adapter, tmp_path / "nowhere", "mobius.json")


def test_lora_inputs_with_unknown_module_names(capsys, llama, tmp_path):
    base, _, _ = llama
    out = tmp_path / "out"
    capsys.readouterr()
    code = main(["build", "--model", str(base), "--output", str(out), "-q", "--lora-inputs", "qkv"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "qkv" in err, err
    assert not out.exists()
