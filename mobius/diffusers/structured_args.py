"""Forward arguments that are Python structures of tensors (lists, lists of pairs, dicts): each
member is a graph input of its own, named by one rule, and the structure is rebuilt from those
inputs for the call.

The rule: member ``i`` of a list argument ``name`` is the input ``name.{i}``, and a member that
is itself a tuple applies the rule again (``name.{i}.{j}``), as list outputs are named
(``down_block_res_samples.{i}``). A graph is made for one member count, fixed by the config (a
tensor per transformer block) or by the class's pipeline (two encoders). A dict argument's
entries are inputs under their keys (SDXL's ``added_cond_kwargs``: ``text_embeds`` and
``time_ids``, the UNet contract's names). An input whose frames the forward takes folded into
the batch is given unfolded and folded for the call (``folded``; ``folded_frames.py``).
``generic.ForwardTask`` lists the members as inputs and calls ``assemble`` before the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from mobius.diffusers import cosmos3_args, protein_args
from mobius.diffusers.folded_frames import unfolded_spec
from mobius.diffusers.tasks import IMAGE_SEQUENCE, SEQUENCE_2, unet_condition_inputs
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = None  # the model's dtype
# ControlNet Union: control images per graph (its pipeline's usual call: one image, one mode)
UNION_IMAGES = 1
# T5FilmDecoder: the (encoding, mask) pairs its spectrogram pipeline passes: the notes
# encoder's, then the continuous-context encoder's
FILM_ENCODERS = 2


@dataclass(frozen=True)
class Structure:
    """How one argument is made of graph inputs: their specs, and the value from them."""

    specs: Callable[[Any], list[TensorSpec]]
    build: Callable[[str, dict[str, torch.Tensor]], Any]
    members: Callable[[str, dict[str, torch.Tensor]], list[str]]


def _listed(name: str, x: dict[str, torch.Tensor]) -> list[str]:
    return [k for k in x if k.startswith(f"{name}.")]


def _nested(name: str, x: dict[str, torch.Tensor]) -> list:
    """The list ``name`` from the inputs ``name.{i}`` (tuples from ``name.{i}.{j}``)."""
    entries: dict[int, Any] = {}
    for key in _listed(name, x):
        index = [int(part) for part in key[len(name) + 1 :].split(".")]
        if len(index) == 1:
            entries[index[0]] = x[key]
        else:
            entries.setdefault(index[0], {})[index[1]] = x[key]
    return [
        tuple(v[j] for j in sorted(v)) if isinstance(v, dict) else v
        for _, v in sorted(entries.items())
    ]


def tensor_list(count: Callable[[Any], int], member: Callable[[Any, str], TensorSpec]) -> Callable:
    """A list of ``count(cfg)`` tensors, member ``i`` the input ``name.{i}``."""

    def structure(name: str) -> Structure:
        return Structure(
            lambda cfg: [member(cfg, f"{name}.{i}") for i in range(count(cfg))],
            _nested,
            _listed,
        )

    return structure


def pair_list(pairs: Callable[[Any], list[tuple[Callable, Callable]]]) -> Callable:
    """A list of tuples: pair ``i``'s members the inputs ``name.{i}.0``, ``name.{i}.1``."""

    def structure(name: str) -> Structure:
        def specs(cfg: Any) -> list[TensorSpec]:
            return [
                rule(cfg, f"{name}.{i}.{j}")
                for i, pair in enumerate(pairs(cfg))
                for j, rule in enumerate(pair)
            ]

        return Structure(specs, _nested, _listed)

    return structure


def entries(specs: Callable[[Any], list[TensorSpec]], keys: tuple[str, ...]) -> Callable:
    """A dict of tensors, each entry the input named by its key (None when there is none)."""

    def structure(_name: str) -> Structure:
        return Structure(
            specs,
            lambda _n, x: {k: x[k] for k in keys if k in x} or None,
            lambda _n, x: [k for k in keys if k in x],
        )

    return structure


def folded(channels_key: str) -> Callable:
    """Frames folded into the batch: the input unfolded, ``[batch, num_frames, channels, height,
    width]``, folded for the call (``folded_frames``)."""

    def structure(name: str) -> Structure:
        return Structure(
            lambda cfg: [unfolded_spec(name, cfg.get(channels_key))],
            lambda n, x: x[n].flatten(0, 1),
            lambda n, _x: [n],
        )

    return structure


def _sdxl_added_conditions(cfg: Any) -> list[TensorSpec]:
    """SDXL's pooled text and six size conditions (none without ``text_time``)."""
    return [s for s in unet_condition_inputs(cfg) if s.name in ("text_embeds", "time_ids")]


def _control_image(cfg: Any, name: str) -> TensorSpec:
    channels = cfg.get("conditioning_channels") or 3
    return TensorSpec(name, FLOAT, (BATCH, channels, "image_height", "image_width"))


def _bria_text_layer(cfg: Any, name: str) -> TensorSpec:
    return TensorSpec(name, FLOAT, (BATCH, SEQUENCE, cfg.get("text_encoder_dim", 2048)))


def _film_pairs(cfg: Any) -> list[tuple[Callable, Callable]]:
    """Each encoder's states ``[batch, length, d_model]`` and its bool mask ``[batch, length]``,
    each encoder a length of its own (the notes' tokens, the context's frames)."""
    width = cfg.get("d_model", 768)

    def pair(axis: str) -> tuple[Callable, Callable]:
        return (
            lambda _cfg, name: TensorSpec(name, FLOAT, (BATCH, axis, width)),
            lambda _cfg, name: TensorSpec(name, torch.bool, (BATCH, axis)),
        )

    return [pair(axis) for axis in (SEQUENCE, SEQUENCE_2)[:FILM_ENCODERS]]


def _rotary_pair(cfg: Any, name: str) -> TensorSpec:
    """One of an LTX-2-style rotary table's (cos, sin): per token ``[batch, tokens, inner_dim]``
    (interleaved), or per head ``[batch, heads, tokens, head_dim / 2]`` (split)."""
    heads, head_dim = cfg.get("num_attention_heads", 32), cfg.get("attention_head_dim", 128)
    if cfg.get("rope_type", "interleaved") == "split":
        return TensorSpec(name, FLOAT, (BATCH, heads, IMAGE_SEQUENCE, head_dim // 2))
    return TensorSpec(name, FLOAT, (BATCH, IMAGE_SEQUENCE, heads * head_dim))


def _pair(name: str) -> Structure:
    """A (cos, sin) tuple: the inputs ``name.0``, ``name.1``."""
    return Structure(
        lambda cfg: [_rotary_pair(cfg, f"{name}.{i}") for i in range(2)],
        lambda n, x: tuple(_nested(n, x)),
        _listed,
    )


STRUCTURES: dict[tuple[str, str], Callable[[str], Structure]] = {
    # Bria FIBO: one text-encoder tensor per transformer block, double and single
    ("BriaFiboTransformer2DModel", "text_encoder_layers"): tensor_list(
        lambda cfg: cfg.get("num_layers", 19) + cfg.get("num_single_layers", 38), _bria_text_layer),
    # ControlNet Union: one control image per graph; SDXL's added conditions
    ("ControlNetUnionModel", "controlnet_cond"): tensor_list(lambda _cfg: UNION_IMAGES,
                                                             _control_image),
    ("ControlNetUnionModel", "added_cond_kwargs"): entries(_sdxl_added_conditions,
                                                           ("text_embeds", "time_ids")),
    # frames folded into the batch (num_frames derived: argument_rules.DERIVED)
    ("TransformerTemporalModel", "hidden_states"): folded("in_channels"),
    # T5FilmDecoder: the spectrogram pipeline's two encodings, each with its mask
    ("T5FilmDecoder", "encodings_and_masks"): pair_list(_film_pairs),
    # SANA-WM's refiner: the (cos, sin) rotary table its pipeline builds per window from the
    # frames' absolute positions, the grid's sizes and the fps (packed tokens carry no grid)
    ("SanaWMLTX2RefinerTransformer3DModel", "video_rotary_emb"): _pair,
    # RFD4-Proteina: the preprocessor's tensors its config's features read, under their keys
    (protein_args.TRANSFORMER, "conditioning"): entries(protein_args.conditioning_specs,
                                                        protein_args.ALL_KEYS),
    # Cosmos 3's omni transformer: one vision item per call (cosmos3_args.py)
    (cosmos3_args.MODEL, "vision_tokens"): tensor_list(lambda _cfg: cosmos3_args.ITEMS,
                                                       cosmos3_args.vision_tokens),
    (cosmos3_args.MODEL, "vision_noisy_frame_indexes"): tensor_list(
        lambda _cfg: cosmos3_args.ITEMS, cosmos3_args.noisy_frame_indexes),
}  # fmt: skip


def structured(cls: type) -> set[str]:
    """The arguments of ``cls`` given as structures of graph inputs."""
    return {arg for owner, arg in STRUCTURES if owner == cls.__name__}


def member_specs(name: str, cfg: Any, cls: type) -> list[TensorSpec]:
    """The graph inputs that make ``cls.forward``'s argument ``name``."""
    return STRUCTURES[(cls.__name__, name)](name).specs(cfg)


def assemble(cls: type, x: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The call's keyword arguments: each structure rebuilt from its member inputs, which are
    no arguments themselves."""
    out = dict(x)
    for name in structured(cls):
        structure = STRUCTURES[(cls.__name__, name)](name)
        for member in structure.members(name, x):
            out.pop(member)
        out[name] = structure.build(name, x)
    return out
