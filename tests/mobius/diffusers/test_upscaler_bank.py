"""Kandinsky 6 SR's latent upscaler bank (``mobius/diffusers/upscaler_bank.py``): one graph per
scale the bank holds, ``latent_upscaler_x2/`` and ``latent_upscaler_x4/``, each ``latents`` ->
``out_sample`` at its scale. Converted with the CLI and matching PyTorch at atol 1e-4 at the two
size sets; a bank holding one scale has that graph alone."""

from __future__ import annotations

import json

from mobius.diffusers.components import component_tasks
from mobius.diffusers.config import architecture
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

BANK = "Kandinsky6SRLatentUpscalerBank"


def test_one_graph_per_scale_matches_pytorch(tmp_path):
    model, out = convert(BANK, tmp_path)
    for scale in (2, 4):
        graph = json.loads((out / f"latent_upscaler_x{scale}" / "mobius.json").read_text())
        assert graph["graphs"]["model.onnx"] == {"inputs": ["latents"], "outputs": ["out_sample"]}
    diffs = max_diffs(model, out)
    assert len(diffs) == 4  # two graphs at two size sets
    assert max(diffs.values()) < ATOL, diffs


def test_a_scale_the_bank_does_not_hold_has_no_graph():
    arch = architecture({"_class_name": BANK, "in_channels": 4, "scales": [4]})
    assert [t.name for t in component_tasks(BANK) if t.supports(arch)] == ["latent_upscaler_x4"]
