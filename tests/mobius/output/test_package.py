"""What a build writes: names, tying, external data, dtypes, graph-only builds, entry points."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from safetensors import safe_open

import mobius
from mobius.output.disk_form import CLASSES, SCOPES
from mobius.testing.parity import OnnxCausalLM, decoder_inputs


def _initializer_names(directory) -> set[str]:
    model = onnx.load(str(directory / "model.onnx"), load_external_data=False)
    return {i.name for i in model.graph.initializer}


def _source_keys(directory) -> dict[str, str]:
    """Checkpoint key -> initializer name; a transformed weight names its key(s) in metadata
    (a packed one, such as an encoder's q/k/v, names all of them, comma-separated)."""
    model = onnx.load(str(directory / "model.onnx"), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    renamed = json.loads(meta.get("mobius.weight_sources", "{}"))
    keys = {i.name: i.name for i in model.graph.initializer if i.name not in renamed}
    keys.update({key: name for name, source in renamed.items() for key in source.split(",")})
    return keys


def test_initializers_are_named_by_state_dict_key_and_tied_weights_stored_once(
    checkpoints, tmp_path
):
    directory, model, _ = checkpoints.get("gemma")  # gemma ties lm_head to the embedding
    package = mobius.build(directory)
    out = package.save(tmp_path / "onnx")
    with safe_open(directory / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    sources = _source_keys(out)
    assert keys <= set(sources)
    assert sources["model.layers.0.mlp.up_proj.weight"] == "model.layers.0.mlp.up_proj.weight.T"
    names = _initializer_names(out)
    assert (
        "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    )  # tied: stored once
    weight_bytes = sum(
        p.numel() * 4 for p in model.parameters()
    )  # parameters() yields tied ones once
    data_size = (out / "model.onnx.data").stat().st_size  # tensors under 256 bytes stay inline
    assert abs(data_size - weight_bytes) < 16 * 1024
    assert data_size < weight_bytes + model.model.embed_tokens.weight.numel() * 4 // 2
    _assert_saved_without_repeats(package.model, out)


def _assert_saved_without_repeats(model: ir.Model, out) -> None:
    """``output/disk_form.py``: the file lacks initializers' value_info and onnxscript's copies of
    ``namespace``; read back, initializers have their types; the model in memory is unchanged."""
    saved = onnx.load(str(out / "model.onnx"), load_external_data=False)
    initializers = {i.name for i in saved.graph.initializer}
    assert initializers and not initializers & {v.name for v in saved.graph.value_info}
    keys = [{p.key for p in n.metadata_props} for n in saved.graph.node]
    assert any("namespace" in k for k in keys)
    assert not any(SCOPES in k or CLASSES in k for k in keys)
    for value in ir.load(out / "model.onnx").graph.initializers.values():
        assert value.dtype == value.const_value.dtype and value.shape == value.const_value.shape
    assert all(v.type is not None for v in model.graph.initializers.values())
    assert any(SCOPES in n.metadata_props and CLASSES in n.metadata_props for n in model.graph)


def test_checkpoint_renamed_by_transformers_loads_under_its_file_keys(checkpoints, tmp_path):
    directory, _, _ = checkpoints.get("vit")  # ViT files keep legacy names (encoder.layer.N...)
    out = mobius.build(directory).save(tmp_path / "onnx")
    assert "encoder.layer.0.attention.attention.query.weight" in _source_keys(out)


def test_sharded_checkpoint_with_index(checkpoints, tmp_path):
    _, model, config = checkpoints.get("llama")
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(list(sharded.glob("*.safetensors"))) > 1
    out = mobius.build(sharded).save(tmp_path / "onnx")
    from mobius.testing.parity import max_abs_diff

    assert max_abs_diff(model, out, config) <= 1e-4


def test_f16_build_runs_close_to_f32(checkpoints, tmp_path):
    directory, model, config = checkpoints.get("llama")
    out = mobius.build(directory, dtype="f16").save(tmp_path / "onnx")
    feeds = decoder_inputs(config.vocab_size)
    lm = OnnxCausalLM(out)
    logits, _ = lm.run(
        *(feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids")),
        lm.empty_cache(2),
    )
    assert logits.dtype == np.float16
    import torch

    with torch.no_grad():
        expected = model(**feeds).logits.numpy()
    keep = feeds["attention_mask"].bool().numpy()
    assert np.abs(logits.astype(np.float32) - expected)[keep].max() < 5e-2


def test_no_weights_build_exposes_parameters_as_inputs(checkpoints, tmp_path):
    directory, _, _ = checkpoints.get("llama")
    out = mobius.build(directory, weights=False).save(tmp_path / "onnx")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    inputs = [i.name for i in model.graph.input]
    assert inputs[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert "model.layers.0.self_attn.q_proj.weight" in inputs


def test_saved_package_carries_config_and_is_atomic(checkpoints, tmp_path):
    directory, _, _ = checkpoints.get("llama")
    out = mobius.build(directory).save(tmp_path / "onnx")
    assert (out / "config.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "entry", [["-m", "mobius"], ["-c", "from mobius.cli import main; raise SystemExit(main())"]]
)
def test_entry_points(entry, checkpoints, tmp_path):
    directory, _, _ = checkpoints.get("llama")
    out = tmp_path / "onnx"
    done = subprocess.run(
        [sys.executable, *entry, "build", "--model", str(directory), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout
    assert (out / "model.onnx").is_file()
