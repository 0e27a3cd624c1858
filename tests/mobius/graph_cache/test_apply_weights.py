"""``apply_weights``: the base's graphs with a fine-tune's weights give the package a
cold build of the fine-tune gives, byte for byte; a checkpoint of another shape is refused."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

import mobius
from mobius.errors import ConfigError, UnsupportedError, WeightsError
from mobius.graph_cache import apply_weights
from tests.mobius.graph_cache.conftest import assert_same_package

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "finetune_checkpoints.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("finetune_checkpoints", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = tmp_path_factory.mktemp("run")
    module.make_demo_run(root / "run", steps=2)
    module.export_run(root / "run", root / "onnx", precision="int4")
    return root


def test_example_matches_cold_builds(run, tmp_path):
    second = run / "run" / "checkpoint-200"
    mobius.build(second, precision="int4").save(tmp_path / "cold")
    assert_same_package(tmp_path / "cold", run / "onnx" / "checkpoint-200")


def test_other_shapes_and_configs_refused(run, tmp_path):
    base = mobius.build(run / "run" / "checkpoint-100")
    changed = tmp_path / "changed"
    shutil.copytree(run / "run" / "checkpoint-200", changed)
    config = json.loads((changed / "config.json").read_text())
    config["rope_theta"] = 1234.0
    (changed / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="rope_theta"):
        apply_weights(base, changed)
    from mobius.testing.tiny import make_checkpoint

    width = json.loads((changed / "config.json").read_text())["intermediate_size"]
    make_checkpoint("llama", tmp_path / "wider", intermediate_size=width + 16)
    config = json.loads((tmp_path / "wider" / "config.json").read_text())
    config["intermediate_size"] = width  # the same config, tensors of another shape
    (tmp_path / "wider" / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match="differ in shape"):
        apply_weights(base, tmp_path / "wider").save(tmp_path / "never")


def test_graph_only_package_refused(run):
    graph_only = mobius.build(run / "run" / "checkpoint-100", weights=False)
    with pytest.raises(UnsupportedError, match="weights=False"):
        apply_weights(graph_only, run / "run" / "checkpoint-200")
