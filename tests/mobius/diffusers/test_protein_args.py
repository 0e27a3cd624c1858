"""RFD4-Proteina (``mobius/diffusers/protein_args.py``): its conditioning dict's entries are
inputs under their keys, the keys those its config's features read; chirality, which the model
aligns by SVD, is not one. Converted with the CLI and matching PyTorch at atol 1e-4 at two size
sets, fed padded rows, a few in-context tokens and missing (NaN) coordinates."""

from __future__ import annotations

import json

import pytest

from mobius.diffusers.protein_args import conditioning_keys
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    return convert("RFD4ProteinaTransformer", tmp_path_factory.mktemp("rfd4"))


def test_conditioning_keys_follow_the_features():
    keys = [k[0] for k in conditioning_keys({"feats_seq": ["xt_bb_ca", "hbond_modernized"],
                                             "feats_pair_repr": ["molecule_idx_pair"]})]  # fmt: skip
    assert keys == ["is_in_context_conditioning", "supports_local_latent",
                    "condition_hbond_1_atom", "molecule_iid"]  # fmt: skip
    assert "chirality" not in [k[0] for k in conditioning_keys({"feats_seq": ["chirality"]})]


def test_transformer_matches_pytorch(transformer):
    model, out = transformer
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert {"padding_mask", "token_type", "atom37_mask", "is_in_context_conditioning",
            "condition_coordinate_1_atom", "token_bond_path_length"} <= set(graph["inputs"])  # fmt: skip
    assert graph["outputs"] == ["backbone", "out_local_latents", "sequence_logits",
                                "insertion_logits"]  # fmt: skip
    diffs = max_diffs(model, out)
    assert len(diffs) == 8
    assert max(diffs.values()) < ATOL, diffs
