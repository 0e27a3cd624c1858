"""A model class that runs on another component's modules (``mobius/diffusers/
shared_modules.py``): the Z-Image ControlNet, converted beside its pipeline's transformer (whose
embedders and refiners it runs on, their weights read from the transformer's checkpoint),
matches PyTorch at atol 1e-4 at two size sets; alone, it is refused by name."""

from __future__ import annotations

import json

import diffusers

from mobius.cli import main
from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def test_controlnet_beside_its_transformer_matches_pytorch(tmp_path):
    model, out = convert("ZImageControlNetModel", tmp_path)
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
