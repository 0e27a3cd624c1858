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
QwenImage 2.1 (patch size 1) also takes ``img_mask``, derived as text-to-image's layout (the
prompt, then the target's slots), and gives the prompt's tokens before the target's: its
``sample`` is the last ``(height / p) * (width / p)`` tokens, unpacked.

Classes that take their latents unpacked already (HunyuanDiT, Lumina-Next, HiDream) get the
ints' other uses from the same input's size: the rotary tables their pipelines compute from the
grid are derived arguments (``grid_rotary.py``); what their own forward builds from the grid
in Python is overridden per family (``overrides/hidream.py``, ``overrides/lumina_next.py``).
HunyuanDiT's two prompts are padded to the config's ``text_len`` and ``text_len_t5`` (a learned
padding table spans them), so their lengths are the config's.
"""

from __future__ import annotations

from typing import Any

import torch

from mobius.diffusers.grid_rotary import VAE_SCALE, hunyuan_dit_rotary, lumina_next_rotary
from mobius.diffusers.tasks import HEIGHT, SEQUENCE_2, TEXT_LAYERS, WIDTH
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = None  # the model's dtype
# classes whose forward takes packed patch tokens and the grid as Python ints, with the forward
# arguments that are packed latents
PACKED: dict[str, tuple[str, ...]] = {
    "QwenImageTransformer2DModel": ("hidden_states",),
    "QwenImageControlNetModel": ("hidden_states", "controlnet_cond"),
    "NucleusMoEImageTransformer2DModel": ("hidden_states",),
    "QwenImage21Transformer2DModel": ("hidden_states",),
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
    p = _patch(cfg)
    tokens = output["sample"][:, -(height // p) * (width // p) :]  # QwenImage21: text tokens first
    output["sample"] = unpack(tokens, p, height, width)
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


def _hunyuan_text(name: str, length_key: str, width_key: str, mask: bool = False):
    """One of HunyuanDiT's prompts (or its mask, True for a token), padded to ``length_key``."""

    def rule(cfg: Any) -> TensorSpec:
        length = cfg.get(length_key)
        if mask:
            return TensorSpec(name, torch.bool, (BATCH, length))
        return TensorSpec(name, FLOAT, (BATCH, length, cfg.get(width_key)))

    return rule


HUNYUAN_DIT = ("HunyuanDiT2DModel", "HunyuanDiT2DControlNetModel")
for _name in HUNYUAN_DIT:
    RULES |= {
        (_name, "encoder_hidden_states"): _hunyuan_text(
            "encoder_hidden_states", "text_len", "cross_attention_dim"),
        (_name, "text_embedding_mask"): _hunyuan_text(
            "text_embedding_mask", "text_len", "", mask=True),
        (_name, "encoder_hidden_states_t5"): _hunyuan_text(
            "encoder_hidden_states_t5", "text_len_t5", "cross_attention_dim_t5"),
        (_name, "text_embedding_mask_t5"): _hunyuan_text(
            "text_embedding_mask_t5", "text_len_t5", "", mask=True),
        # original size, target size and crop's top-left corner, embedded like timesteps
        (_name, "image_meta_size"): lambda _cfg: TensorSpec("image_meta_size", FLOAT, (BATCH, 6)),
    }  # fmt: skip

# HiDream: latents unpacked (its patchify, overridden for every grid: overrides/hidream.py);
# the T5 prompt; the Llama prompt as every layer's hidden states (its pipeline stacks them all;
# the config's llama_layers pick some), a text of its own length; the pooled CLIP embeddings
RULES |= {
    ("HiDreamImageTransformer2DModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, cfg.get("in_channels"), HEIGHT, WIDTH)),
    ("HiDreamImageTransformer2DModel", "timesteps"): lambda _cfg: TensorSpec(
        "timesteps", torch.float32, (BATCH,)),
    ("HiDreamImageTransformer2DModel", "encoder_hidden_states_t5"): lambda cfg: TensorSpec(
        "encoder_hidden_states_t5", FLOAT, (BATCH, SEQUENCE, cfg.get("caption_channels")[0])),
    ("HiDreamImageTransformer2DModel", "encoder_hidden_states_llama3"): lambda cfg: TensorSpec(
        "encoder_hidden_states_llama3", FLOAT,
        (TEXT_LAYERS, BATCH, SEQUENCE_2, cfg.get("caption_channels")[1])),
    ("HiDreamImageTransformer2DModel", "pooled_embeds"): lambda cfg: TensorSpec(
        "pooled_embeds", FLOAT, (BATCH, cfg.get("text_emb_dim"))),
}  # fmt: skip

# Lumina-Next: its caption and mask (True for a token); the timestep a fraction, 1 - t / 1000
RULES |= {
    ("LuminaNextDiT2DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, SEQUENCE, cfg.get("cross_attention_dim"))),
    ("LuminaNextDiT2DModel", "encoder_mask"): _mask("encoder_mask"),
}  # fmt: skip


def _text_then_target(cfg: Any, x: dict[str, torch.Tensor]) -> torch.Tensor:
    """QwenImage21's ``img_mask`` for text-to-image: the prompt's tokens, then one image slot per
    2 x 2 latent tokens of the target (its pipeline's ``append_target_slots``)."""
    latents, text = x["hidden_states"], x["encoder_hidden_states"]
    slots = latents.shape[-2] * latents.shape[-1] // 4
    batch, length = text.shape[0], text.shape[1]
    return torch.cat([torch.zeros(batch, length, dtype=torch.bool, device=text.device),
                      torch.ones(batch, slots, dtype=torch.bool, device=text.device)], dim=1)  # fmt: skip


# QwenImage 2.1 (text-to-image: overrides/qwenimage.py): latents unpatched (patch_size 1), its
# VLM's text states context_in_dim wide and their mask
RULES |= {
    ("QwenImage21Transformer2DModel", "hidden_states"): _unpacked("hidden_states", "in_channels"),
    ("QwenImage21Transformer2DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, SEQUENCE, cfg.get("context_in_dim"))),
    ("QwenImage21Transformer2DModel", "encoder_hidden_states_mask"): _mask(
        "encoder_hidden_states_mask"),
}  # fmt: skip

DERIVED = {(name, "img_shapes"): _grid for name in PACKED}
DERIVED[("QwenImage21Transformer2DModel", "img_shapes")] = lambda cfg, x: [_grid(cfg, x)]
DERIVED[("QwenImage21Transformer2DModel", "img_mask")] = _text_then_target
DERIVED[("LuminaNextDiT2DModel", "image_rotary_emb")] = lumina_next_rotary
# the pipeline's proportional attention (proportional_attn, its default): the base length is the
# default image's patch count
DERIVED[("LuminaNextDiT2DModel", "cross_attention_kwargs")] = lambda cfg, _x: {
    "base_sequence_length": (cfg.get("sample_size") * VAE_SCALE // 16) ** 2
}
DERIVED |= {(name, "image_rotary_emb"): hunyuan_dit_rotary for name in HUNYUAN_DIT}
# the one style of its one-entry table: the pipelines pass 0 for every row
DERIVED |= {
    (name, "style"): lambda _cfg, x: torch.zeros(
        x["hidden_states"].shape[0], dtype=torch.int64, device=x["hidden_states"].device)
    for name in HUNYUAN_DIT
}  # fmt: skip

# optional in the signature; the pipelines pass the prompt's mask, HunyuanDiT's every condition
NEEDED = {name: {"encoder_hidden_states_mask"} for name in PACKED}
NEEDED |= {
    name: {"encoder_hidden_states", "text_embedding_mask", "encoder_hidden_states_t5",
           "text_embedding_mask_t5", "image_meta_size"}
    for name in HUNYUAN_DIT
}  # fmt: skip
NEEDED["HiDreamImageTransformer2DModel"] = {
    "timesteps",
    "encoder_hidden_states_t5",
    "encoder_hidden_states_llama3",
    "pooled_embeds",
}
