"""Every class of key field changes the key: config, tensors, companion files, options,
environment, versions; where the checkpoint was saved does not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from mobius.graph_cache import key as key_module
from mobius.graph_cache.key import build_key
from mobius.sources.resolve import resolve

OPTIONS = {"dtype": None, "precision": None, "block_size": 32, "features": []}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    from mobius.testing.tiny import make_checkpoint

    directory = tmp_path_factory.mktemp("key") / "base"
    make_checkpoint("llama", directory)
    return directory


def _key(directory: Path, **options) -> str:
    return build_key(resolve(directory), {**OPTIONS, **options})[0]


def _copy(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base, tmp_path / "copy"))


def test_same_shape_elsewhere_same_key(base, tmp_path):
    copy = _copy(base, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    config["_name_or_path"] = "somewhere/else"
    (copy / "config.json").write_text(json.dumps(config, indent=4))
    assert _key(copy) == _key(base)


def test_config_field(base, tmp_path):
    copy = _copy(base, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    config["rms_norm_eps"] = 1e-3
    (copy / "config.json").write_text(json.dumps(config))
    assert _key(copy) != _key(base)


def test_tensor_dtype(base, tmp_path):
    copy = _copy(base, tmp_path)
    tensors = load_file(copy / "model.safetensors")
    save_file({k: v.half() for k, v in tensors.items()}, copy / "model.safetensors")
    assert _key(copy) != _key(base)


def test_companion_file(base, tmp_path):
    copy = _copy(base, tmp_path)
    generation = copy / "generation_config.json"
    config = json.loads(generation.read_text()) if generation.exists() else {}
    generation.write_text(json.dumps({**config, "eos_token_id": 7}))
    assert _key(copy) != _key(base)


@pytest.mark.parametrize(
    "option",
    [
        {"dtype": "f16"},
        {"precision": "int4"},
        {"block_size": 64},
        {"features": ["static-cache"]},
        {"ep": "cpu"},
        {"task": "text-generation"},
    ],
)
def test_option(base, option):
    assert _key(base, **option) != _key(base)


def test_environment(base, monkeypatch):
    before = _key(base)
    monkeypatch.setenv("MOBIUS_FULL_TRACE", "1")
    assert _key(base) != before


def test_versions(base, monkeypatch):
    before = _key(base)
    real = key_module.versions
    monkeypatch.setattr(key_module, "versions", lambda: {**real(), "transformers": "0.0"})
    assert _key(base) != before
