"""A model class that runs on another component's modules (``mobius/diffusers/
shared_modules.py``): the Z-Image ControlNet, converted beside its pipeline's transformer (whose
embedders and refiners it runs on, their weights read from the transformer's checkpoint),
matches PyTorch at atol 1e-4 at two size sets, and ``mobius verify`` loads it beside its
transformer too; alone, it is refused by name."""

from __future__ import annotations

import json

import diffusers
import pytest

from mobius.cli import main
from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


@pytest.fixture(scope="module")
def controlnet(tmp_path_factory):
    return convert("ZImageControlNetModel", tmp_path_factory.mktemp("controlnet"))


def test_controlnet_beside_its_transformer_matches_pytorch(controlnet):
    model, out = controlnet
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert graph["inputs"] == ["x", "t", "cap_feats", "control_context", "conditioning_scale"]
    assert graph["outputs"] == ["controlnet_block_samples.0"]
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs


def test_controlnet_alone_is_refused(tmp_path, capsys):
    kwargs = next(c for c in ALL_CONFIGS if c[0] == "ZImageControlNetModel")[2]
    randomize_scaled(diffusers.ZImageControlNetModel(**kwargs), 0).save_pretrained(tmp_path / "cn")
    assert main(["build", "--model", str(tmp_path / "cn"), "--output", str(tmp_path / "o")]) == 2
    assert "from its pipeline directory, beside transformer/" in capsys.readouterr().err


def test_verify_loads_the_transformer_beside_it(controlnet):
    _, out = controlnet
    assert main(["verify", "--model", str(out.parent / "model"), "--onnx", str(out), "-q"]) == 0
