"""``apply_weights``: a graph's package with a fine-tune's weights is the package a cold build of
the fine-tune gives, byte for byte (the example: a graph-only int4 build, each checkpoint of a
run applied to it); a checkpoint of another config or shape is refused."""

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
    base = mobius.build(run / "run" / "checkpoint-100")  # with weights: its recipes are rebound
    changed = tmp_path / "changed"
    shutil.copytree(run / "run" / "checkpoint-200", changed)
    config = json.loads((changed / "config.json").read_text())
    config["rope_theta"] = 1234.0
    (changed / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="rope_theta"):
        base.apply_weights(changed)
    from mobius.testing.tiny import make_checkpoint

    width = json.loads((changed / "config.json").read_text())["intermediate_size"]
    make_checkpoint("llama", tmp_path / "wider", intermediate_size=width + 16)
    config = json.loads((tmp_path / "wider" / "config.json").read_text())
    config["intermediate_size"] = width  # the same config, tensors of another shape
    (tmp_path / "wider" / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match="differ in shape"):
        apply_weights(base, tmp_path / "wider").save(tmp_path / "never")


def test_package_not_from_a_checkpoint_refused(run):
    import onnx_ir as ir

    from mobius.output.package import ModelPackage

    made_elsewhere = ModelPackage(model=ir.Model(ir.Graph([], [], nodes=[]), ir_version=10))
    with pytest.raises(UnsupportedError, match="mobius.build"):
        made_elsewhere.apply_weights(run / "run" / "checkpoint-200")
