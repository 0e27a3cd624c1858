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


def test_packed_layout_partitions_the_sequence():
    """MiniMax-H3's index feeds: the prompt's, video's and audio's rows split the packed
    sequence with no overlap, tagged by modality, every noise level used."""
    import torch

    from mobius.diffusers.tasks import related_sizes
    from mobius.verification.diffusers_feeds import PACKED_LAYOUTS, SIZE_SETS

    for sizes in SIZE_SETS:
        sizes = related_sizes({}, sizes)
        layout = PACKED_LAYOUTS["MiniMaxH3Transformer3DModel"](
            {}, sizes, torch.Generator().manual_seed(0)
        )
        parts = [layout[f"{m}_indices"] for m in ("text", "video", "audio")]
        assert torch.equal(torch.cat(parts).sort().values, torch.arange(sizes["packed_length"]))
        for tag, part in zip((1, 0, 2), parts, strict=True):
            assert (layout["token_tags"][part] == tag).all()
        assert set(layout["timestep_indices"].tolist()) == set(range(sizes["noise_levels"]))


def test_packed_sequence_matches_pytorch(tmp_path):
    """MiniMax-H3: one packed sequence laid out by index tensors, its axes (the packed length,
    the noise levels) dynamic, both outputs matching PyTorch at two size sets."""
    model, out = convert("MiniMaxH3Transformer3DModel", tmp_path)
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert graph["outputs"] == ["out_sample", "audio_sample"]
    diffs = max_diffs(model, out)
    assert len(diffs) == 4
    assert max(diffs.values()) < ATOL, diffs
