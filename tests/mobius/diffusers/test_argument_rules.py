"""Forward arguments sized by a class's own shape rules (``mobius/diffusers/argument_rules.py``):
Kandinsky 5's channels-last latents and text widths from its own config keys, and its rotary
positions derived in the graph from the latent grid and the prompt, not graph inputs. Converted
with the CLI and matching PyTorch at atol 1e-4 at two size sets."""

from __future__ import annotations

import json

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def test_argument_rules_match_pytorch(tmp_path):
    model, out = convert("Kandinsky5Transformer3DModel", tmp_path)
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert graph["inputs"] == [
        "hidden_states", "encoder_hidden_states", "timestep", "pooled_projections",
    ]  # fmt: skip
    assert graph["outputs"] == ["out_sample"]
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs
