"""Classes under the generic contract (forward's arguments in, the output dataclass out):
a 1D UNet, a prior transformer (an output field other than ``sample``) and an SD3 ControlNet
(a list field as ``name.{i}``), each converted with the CLI and matching PyTorch at atol 1e-4
at two size sets, with the contract's names."""

from __future__ import annotations

import json

import pytest

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

CASES = {
    "UNet1DModel": (["sample", "timestep"], ["out_sample"]),
    "PriorTransformer": (
        ["hidden_states", "timestep", "proj_embedding", "encoder_hidden_states"],
        ["predicted_image_embedding"],
    ),
    "SD3ControlNetModel": (
        ["hidden_states", "controlnet_cond", "conditioning_scale", "encoder_hidden_states",
         "pooled_projections", "timestep"],
        ["controlnet_block_samples.0", "controlnet_block_samples.1"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("label", list(CASES))
def test_generic_contract_matches_pytorch(label, tmp_path):
    model, out = convert(label, tmp_path)
    manifest = json.loads((out / "mobius.json").read_text())
    graph = next(iter(manifest["graphs"].values()))
    assert (graph["inputs"], graph["outputs"]) == CASES[label]
    diffs = max_diffs(model, out)
    assert len(diffs) == 2 * len(CASES[label][1])
    assert max(diffs.values()) < ATOL, diffs
