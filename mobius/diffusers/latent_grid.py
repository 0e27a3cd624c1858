"""Latent grids a pipeline passes as Python ints: the graph takes the latents in their grid
layout and computes the ints from the input's (symbolic) size.

QwenImage-style transformers take their latents packed into ``patch_size``² patch tokens,
``[batch, (height / p) * (width / p), channels * p * p]``, and the patch grid as Python ints
(``img_shapes``, ``[(1, height / p, width / p)] * batch``) that cut their rotary tables. Packed
tokens lose the grid (only its product is left) and an int argument is a constant of the trace,
so such a class's graph takes the latents unpacked, ``hidden_states`` ``[batch, channels, height,
width]`` as its VAE gives them, and packs them itself; the grid ints are ``height // p`` and
``width // p`` of that input (``DERIVED``), symbolic in the trace; the ``sample`` output is
unpacked back to ``[batch, out_channels, height, width]``. A ControlNet's ``controlnet_cond``
is unpacked latents alike. Other outputs (a ControlNet's per-block tokens) stay as tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from mobius.diffusers.tasks import HEIGHT, WIDTH
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = None  # the model's dtype
# classes whose forward takes packed patch tokens and the grid as Python ints, with the forward
# arguments that are packed latents
PACKED: dict[str, tuple[str, ...]] = {
    "QwenImageTransformer2DModel": ("hidden_states",),
    "QwenImageControlNetModel": ("hidden_states", "controlnet_cond"),
    "NucleusMoEImageTransformer2DModel": ("hidden_states",),
}


def _patch(cfg: Any) -> int:
    return cfg.get("patch_size") or 2


def _unpacked(name: str, channels_key: str, extra_key: str | None = None):
    """Unpacked latents for a forward argument that takes ``channels_key`` (plus ``extra_key``)
    channels per patch token: ``[batch, channels / p², height, width]``."""

    def rule(cfg: Any) -> TensorSpec:
        channels = cfg.get(channels_key) + (cfg.get(extra_key) or 0 if extra_key else 0)
        return TensorSpec(name, FLOAT, (BATCH, channels // _patch(cfg) ** 2, HEIGHT, WIDTH))

    return rule


def pack(latents: torch.Tensor, p: int) -> torch.Tensor:
    """``[b, c, h, w]`` -> ``[b, (h / p) * (w / p), c * p * p]``, each token's features channel
    by channel, then patch row and column (the pipelines' ``_pack_latents``)."""
    b, c, h, w = latents.shape
    tokens = latents.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
    return tokens.reshape(b, (h // p) * (w // p), c * p * p)


def unpack(tokens: torch.Tensor, p: int, height: int, width: int) -> torch.Tensor:
    """The inverse of ``pack`` for a ``height`` x ``width`` grid (``_unpack_latents``)."""
    b, _, features = tokens.shape
    c = features // (p * p)
    grid = tokens.view(b, height // p, width // p, c, p, p).permute(0, 3, 1, 4, 2, 5)
    return grid.reshape(b, c, height, width)


def _grid(cfg: Any, x: dict[str, torch.Tensor]) -> list[tuple[Any, Any, Any]]:
    """``img_shapes``: one frame of ``height / p`` x ``width / p`` patches. One entry: every row
    has the grid of the batch's one latent tensor, and the models read the first only."""
    _, _, height, width = x["hidden_states"].shape
    return [(1, height // _patch(cfg), width // _patch(cfg))]


def packed_arguments(cls: type, cfg: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the latents ``cls`` takes packed, packed."""
    names = PACKED.get(cls.__name__, ())
    return kwargs | {n: pack(kwargs[n], _patch(cfg)) for n in names if n in kwargs}


def unpacked_output(cls: type, cfg: Any, x: dict[str, torch.Tensor], output: Any) -> Any:
    """``output`` with its ``sample`` unpacked to the grid of ``x``'s ``hidden_states``."""
    if cls.__name__ not in PACKED or not hasattr(output, "keys") or "sample" not in output:
        return output
    _, _, height, width = x["hidden_states"].shape
    output["sample"] = unpack(output["sample"], _patch(cfg), height, width)
    return output


def _mask(name: str):
    """A prompt's padding mask, True for a token (the pipelines pass the tokenizer's)."""
    return lambda _cfg: TensorSpec(name, torch.bool, (BATCH, SEQUENCE))


RULES = {
    ("QwenImageTransformer2DModel", "hidden_states"): _unpacked("hidden_states", "in_channels"),
    ("QwenImageTransformer2DModel", "encoder_hidden_states_mask"): _mask(
        "encoder_hidden_states_mask"),
    ("QwenImageControlNetModel", "hidden_states"): _unpacked("hidden_states", "in_channels"),
    ("QwenImageControlNetModel", "controlnet_cond"): _unpacked(
        "controlnet_cond", "in_channels", "extra_condition_channels"),
    ("QwenImageControlNetModel", "encoder_hidden_states_mask"): _mask(
        "encoder_hidden_states_mask"),
    ("NucleusMoEImageTransformer2DModel", "hidden_states"): _unpacked(
        "hidden_states", "in_channels"),
    ("NucleusMoEImageTransformer2DModel", "encoder_hidden_states_mask"): _mask(
        "encoder_hidden_states_mask"),
}  # fmt: skip

DERIVED = {(name, "img_shapes"): _grid for name in PACKED}

# optional in the signature; the pipelines pass the prompt's mask
NEEDED = {name: {"encoder_hidden_states_mask"} for name in PACKED}
