"""RFD4-Proteina (``mobius/diffusers/protein_args.py``): its conditioning dict's entries are
inputs under their keys, the keys those its config's features read; chirality, which the model
aligns by SVD, is not one. The denoiser and the autoencoder (its encoder's Gaussian draw an
input) converted with the CLI and matching PyTorch at atol 1e-4 at two size sets, fed padded
rows, a few in-context tokens and missing (NaN) coordinates."""

from __future__ import annotations

import json

import pytest

from mobius.diffusers.protein_args import conditioning_keys
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    return convert("RFD4ProteinaTransformer", tmp_path_factory.mktemp("rfd4"))


@pytest.fixture(scope="module")
def autoencoder(tmp_path_factory):
    return convert("RFD4ProteinaAutoencoder", tmp_path_factory.mktemp("rfd4_vae"))


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


@pytest.mark.sweep  # a sweep check: its draw as an input is unit-tested below in CI
def test_autoencoder_matches_pytorch(autoencoder):
    model, out = autoencoder
    graphs = {}
    for part in ("vae_encoder", "vae_decoder"):
        graphs[part] = next(
            iter(json.loads((out / part / "mobius.json").read_text())["graphs"].values())
        )
    assert graphs["vae_encoder"]["inputs"][-1] == "noise"
    assert graphs["vae_encoder"]["outputs"] == ["latent", "mean", "log_scale"]
    assert graphs["vae_decoder"]["outputs"] == ["coordinates", "residue_type", "emit_mask",
                                                "atom_mask"]  # fmt: skip
    diffs = max_diffs(model, out)
    assert len(diffs) == 14
    assert max(diffs.values()) < ATOL, diffs


def test_encoder_takes_one_draw_of_its_size():
    import torch

    from mobius.diffusers.protein_args import drawing_like

    like = torch.zeros(2, 3, 4)
    with drawing_like(torch.ones(2, 3, 4)):
        assert torch.equal(torch.randn_like(like), torch.ones(2, 3, 4))
    with pytest.raises(ValueError, match="draws"), drawing_like(torch.ones(2, 3, 5)):
        torch.randn_like(like)
    assert torch.randn_like(like).std() > 0  # restored
