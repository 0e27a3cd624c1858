"""RFD4-Proteina: a protein denoiser and autoencoder over per-token molecular tensors, their
conditioning a dict of the preprocessor's tensors.

Proteins are sequences of tokens (residues or atoms), ``[batch, sequence_length, ...]``, padded
per row (``padding_mask``, True for a token); a pair feature is ``[batch, tokens, tokens]``. The
forward's tensors are inputs under their own names; ``conditioning`` is a dict whose entries are
inputs under their keys (``structured_args.entries``), the keys being those the config's feature
lists read (``FEATURE_KEYS``) plus the two masks every call carries
(``is_in_context_conditioning``, ``supports_local_latent``). A key a feature reads only if
present is an input all the same: the pipeline's preprocessor writes them all, and each one's
absent value has a present equivalent (coordinates all NaN, a zero mask). ``chirality`` is not
one: the model rotates it onto the noisy backbone by a 3 x 3 SVD per chiral frame, found by
``torch.where`` over the frames present (no ONNX operator, and a count of frames from the
values), so the graph is the model's call without it (the feature zero). ``recycle_depth``, a
Python int looping the trunk, stays the forward's default (one pass).

The autoencoder (``autoencoder_tasks``) takes the same molecule tensors: its ``vae_encoder``
calls ``encode`` (atom37 coordinates in, the latent sampled by ``torch.randn_like``, whose one
draw is the ``noise`` input), its ``vae_decoder`` calls ``decode``; each takes the conditioning
keys its own feature list reads. ``molecule_feeds`` gives the sweep inputs that exercise them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mobius.diffusers.tasks import DiffusersTask
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = torch.float32  # the model keeps its features in float32 whatever its dtype
INT = torch.int64
TRANSFORMER = "RFD4ProteinaTransformer"
ATOMS = 37  # atom37 slots per token
# SEQUENCE_PROBABILITY_TOKENS of the model: one sequence-probability key per residue name
RESIDUES = (
    "ALA ARG ASN ASP CYS GLN GLU GLY HIS ILE LEU LYS MET PHE PRO SER THR TRP TYR VAL A C G U DA "
    "DC DG DT"
).split()
ALWAYS = (("is_in_context_conditioning", torch.bool, ()), ("supports_local_latent", torch.bool, ()))

Key = tuple[str, torch.dtype, tuple]  # a conditioning key, its dtype, its axes after the tokens
PAIR = ("pair",)  # a pair feature's second token axis
# the conditioning keys each transformer feature reads (values categorical: int64; masks: bool)
FEATURE_KEYS: dict[str, tuple[Key, ...]] = {
    "sequence_probabilities": tuple(
        (f"condition_sequence-probability-{r}_1_residue", FLOAT, ()) for r in RESIDUES),
    "cond_a37coors_nm": (("condition_coordinate_1_atom", FLOAT, (ATOMS, 3)),),
    "cond_a37coors_internal_nm": (("condition_InternalCoordinate_1_atom", FLOAT, (ATOMS, 3)),
                                  ("condition_CoordinateGroup_1_atom", INT, (ATOMS,))),
    "rasa_binned": (("condition_rasa-binned_1_atom", FLOAT, (ATOMS,)),),
    "secondary_structure": (("condition_secondary-structure_1_residue", INT, ()),),
    "hbond_modernized": (("condition_hbond_1_atom", INT, (ATOMS,)),),
    "pistack": (("condition_pistack_1_atom", FLOAT, (ATOMS,)),),
    "pication": (("condition_pication_1_atom", INT, (ATOMS,)),),
    "saltbridge": (("condition_saltbridge_1_atom", INT, (ATOMS,)),),
    "hydrophobic": (("condition_hydrophobic_1_atom", FLOAT, (ATOMS,)),),
    "metal_coord": (("condition_metal-coord_1_atom", INT, (ATOMS,)),),
    "hotspot": (("condition_hotspot_1_atom", FLOAT, (ATOMS,)),),
    "na_ss_state": (("na_ss_state", FLOAT, ()), ("na_ss_state_mask", torch.bool, ())),
    "atom_charge": (("charge", INT, (ATOMS,)),),
    "atomic_element": (("element", INT, (ATOMS,)),),
    # the coordinate groups relabelled at random per step by the pipeline's prepare_coord_group_seq
    "coord_group_seq": (("_prepared_coord_group_seq", FLOAT, (ATOMS,)),),
    "chain_centroid_xyz": (("condition_ChainCentroid_1_atom", FLOAT, (3,)),),
    "cath_code": (("condition_cath-label_1_residue", INT, (3,)),),
    "bond_mask": (("bond_mask", FLOAT, PAIR),),
    "bond_order": (("bond_order", INT, PAIR),),
    "is_aromatic": (("is_aromatic", FLOAT, PAIR),),
    "index_group_pair": (("condition_index-group_1_token", INT, ()),),
    "molecule_idx_pair": (("molecule_iid", INT, ()),),
    "molecule_entity_pair": (("molecule_entity_id", INT, ()),),
    "token_bond_path_length": (("token_bond_path_length", INT, PAIR),),
    "canonical_polymer_ordering": (("canonical_polymer_ordering", FLOAT, PAIR),),
    "na_ss_pair": (("na_ss_pair", FLOAT, PAIR), ("na_ss_pair_mask", torch.bool, PAIR)),
}  # fmt: skip
FEATURE_LISTS = ("feats_seq", "feats_cond_seq", "feats_pair_repr", "feats_pair_cond")


def _spec(key: Key) -> TensorSpec:
    name, dtype, trailing = key
    axes = (SEQUENCE,) if trailing == PAIR else trailing
    return TensorSpec(name, dtype, (BATCH, SEQUENCE, *axes))


def conditioning_keys(cfg: Any) -> list[Key]:
    """The conditioning entries the config's features read, each once, in feature order."""
    keys: dict[str, Key] = {k[0]: k for k in ALWAYS}
    for listed in FEATURE_LISTS:
        for feature in cfg.get(listed) or ():
            keys |= {k[0]: k for k in FEATURE_KEYS.get(feature, ())}
    return list(keys.values())


def conditioning_specs(cfg: Any) -> list[TensorSpec]:
    """The conditioning dict's entries as graph inputs (``structured_args.entries``)."""
    return [_spec(k) for k in conditioning_keys(cfg)]


ALL_KEYS = tuple(dict.fromkeys(k[0] for k in [*ALWAYS, *sum(FEATURE_KEYS.values(), ())]))


def _tokens(name: str, dtype: torch.dtype | None, *trailing: Any) -> Callable[[Any], TensorSpec]:
    return lambda _cfg: TensorSpec(name, dtype, (BATCH, SEQUENCE, *trailing))


def _latents(name: str) -> Callable[[Any], TensorSpec]:
    return lambda cfg: TensorSpec(name, FLOAT, (BATCH, SEQUENCE, cfg.get("latent_dim", 32)))


# the noisy state (backbone CA coordinates in nm, local latents), each modality's time in [0, 1],
# the padding and the per-token topology the pipeline passes
ARGUMENT_RULES = {
    (TRANSFORMER, "bb_ca"): _tokens("bb_ca", FLOAT, 3),
    (TRANSFORMER, "local_latents"): _latents("local_latents"),
    (TRANSFORMER, "bb_ca_time"): lambda _cfg: TensorSpec("bb_ca_time", FLOAT, (BATCH,)),
    (TRANSFORMER, "local_latents_time"): lambda _cfg: TensorSpec(
        "local_latents_time", FLOAT, (BATCH,)),
    (TRANSFORMER, "padding_mask"): _tokens("padding_mask", torch.bool),
    (TRANSFORMER, "token_type"): _tokens("token_type", INT),
    (TRANSFORMER, "atom37_mask"): _tokens("atom37_mask", torch.bool, ATOMS),
}  # fmt: skip
PIPELINE_ARGUMENTS = {TRANSFORMER: {"token_type", "atom37_mask"}}


def molecule_feeds(sizes: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Random inputs a padding-mask pattern would make degenerate: a few in-context tokens (the
    outputs are zero on them, and every token would be one if the mask were fed as padding),
    most tokens with a local latent, atom slots used at random, missing coordinates (NaN, whole
    atoms) among the conditioned ones, and atoms outside any coordinate group."""
    batch, tokens = sizes[BATCH], sizes[SEQUENCE]

    def chance(p: float, *shape: int) -> torch.Tensor:
        return torch.rand(batch, tokens, *shape, generator=gen) < p

    coordinates = torch.randn(batch, tokens, ATOMS, 3, generator=gen)
    centroid = torch.randn(batch, tokens, 3, generator=gen)
    return {
        "is_in_context_conditioning": chance(0.25),
        "supports_local_latent": chance(0.75),
        "atom37_mask": chance(0.7, ATOMS),
        "condition_coordinate_1_atom": coordinates.masked_fill(
            chance(0.3, ATOMS)[..., None], torch.nan
        ),
        "condition_ChainCentroid_1_atom": centroid.masked_fill(chance(0.3)[..., None], torch.nan),
        # -1: an atom in no coordinate group
        "condition_CoordinateGroup_1_atom": torch.randint(
            -1, 3, (batch, tokens, ATOMS), generator=gen
        ),
    }


# the autoencoder: conditioning keys each of its features reads
AUTOENCODER = "RFD4ProteinaAutoencoder"
BOND_TYPES = 10  # incident bond counts per atom slot, by bond type
AUTOENCODER_KEYS: dict[str, tuple[Key, ...]] = {
    "chain_idx_seq": (("chain_iid", INT, ()),),
    "incident_bond_type_counts": (("incident_bond_type_counts", FLOAT, (ATOMS, BOND_TYPES)),),
    "atom37_element_charge_embedding": (("ground_truth_element", INT, (ATOMS,)),
                                        ("charge", INT, (ATOMS,))),
    "cond_residue_type": (("condition_sequence_1_residue", INT, ()),),
}  # fmt: skip
# read by the decoder whatever its features: conditioned coordinate groups keep their atoms
DECODER_ALWAYS = (("condition_CoordinateGroup_1_atom", INT, (ATOMS,)),)


def _autoencoder_keys(cfg: Any, listed: str, always: tuple[Key, ...] = ()) -> list[Key]:
    keys: dict[str, Key] = {k[0]: k for k in (*ALWAYS, *always)}
    for feature in cfg.get(listed) or ():
        keys |= {k[0]: k for k in AUTOENCODER_KEYS.get(feature, ())}
    return list(keys.values())


def _molecule(cfg: Any, atoms: bool = True) -> list[TensorSpec]:
    """The padding, token types and (where read: the encoder's) used atom slots."""
    used = [_tokens("atom37_mask", torch.bool, ATOMS)(cfg)] if atoms else []
    return [_tokens("padding_mask", torch.bool)(cfg), _tokens("token_type", INT)(cfg), *used]


def _encoder_inputs(cfg: Any) -> list[TensorSpec]:
    """atom37 coordinates in nm, the molecule's masks and topology, the encoder's conditioning,
    and the latent's one Gaussian draw (``noise`` ``[1, batch, tokens, latent_dim]``, as
    ``sampling.py`` takes draws)."""
    noise = TensorSpec("noise", FLOAT, (1, BATCH, SEQUENCE, cfg.get("latent_dim", 32)))
    keys = _autoencoder_keys(cfg, "encoder_feats_seq")
    return [_tokens("coords_nm", FLOAT, ATOMS, 3)(cfg), *_molecule(cfg),
            *(_spec(k) for k in keys), noise]  # fmt: skip


def _decoder_inputs(cfg: Any) -> list[TensorSpec]:
    keys = _autoencoder_keys(cfg, "decoder_feats_seq", DECODER_ALWAYS)
    """Per-token latents and backbone CA coordinates, the padding and token types (the decoder
    reads no atom slots: it predicts them), the decoder's conditioning."""
    return [_latents("z_latent")(cfg), _tokens("ca_coors_nm", FLOAT, 3)(cfg),
            *_molecule(cfg, atoms=False), *(_spec(k) for k in keys)]  # fmt: skip


MOLECULE = ("padding_mask", "token_type", "atom37_mask")


def _split(x: dict[str, torch.Tensor], own: tuple[str, ...]) -> tuple[dict, dict]:
    """The call's own arguments and the conditioning dict (every other input)."""
    return {k: v for k, v in x.items() if k in own}, {k: v for k, v in x.items() if k not in own}


@contextlib.contextmanager
def drawing_like(noise: torch.Tensor) -> Iterator[None]:
    """``torch.randn_like`` returns ``noise`` (checked the size asked for) for the call, once."""
    original, taken = torch.randn_like, []

    def draw(like: torch.Tensor, **_: Any) -> torch.Tensor:
        if taken or list(like.shape) != list(noise.shape):
            raise ValueError(f"the encoder draws {list(like.shape)}; one draw of "
                             f"{list(noise.shape)} is given")  # fmt: skip
        taken.append(True)
        return noise.to(like.dtype)

    torch.randn_like = draw
    try:
        yield
    finally:
        torch.randn_like = original
    if not taken:
        raise ValueError("the encoder drew no noise")


def _encode(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    own, conditioning = _split(x, ("coords_nm", *MOLECULE, "noise"))
    noise = own.pop("noise")
    with drawing_like(noise[0]):
        out = model.encode(**own, conditioning=conditioning)
    return out.latent, out.mean, out.log_scale


def _decode(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    own, conditioning = _split(x, ("z_latent", "ca_coors_nm", *MOLECULE))
    out = model.decode(**own, conditioning=conditioning)
    return out.coordinates, out.residue_type, out.emit_mask, out.atom_mask


def autoencoder_tasks() -> list[DiffusersTask]:
    """The autoencoder's ``vae_encoder`` (its latent sampled from the ``noise`` input) and
    ``vae_decoder`` (atom37 coordinates, residue types, emitted tokens and atoms)."""
    return [
        DiffusersTask("vae_encoder", _encoder_inputs, _encode, ("latent", "mean", "log_scale")),
        DiffusersTask("vae_decoder", _decoder_inputs, _decode,
                      ("coordinates", "residue_type", "emit_mask", "atom_mask")),
    ]  # fmt: skip
