"""Classes whose forward takes Python lists of per-sample tensors (the batch is a list's length).

The contract: a pipeline that feeds a batch of equal-size samples passes one stacked tensor per
list argument, ``[batch, ...]`` with a dynamic batch, under the argument's own name; a list the
model gives back (one tensor per sample) is one stacked output. The graph comes from a
per-family override that replaces the loop over the list by batched tensor operations and sets
``takes_stacked_lists`` on the model (``overrides/z_image.py``, ``joyimage_edit_plus.py``,
``omnigen.py``); the model as diffusers builds it is called on diffusers' Python form of each
(``LISTS``: ``list(t.unbind(0))``, nested tuples, a dict of spans), as its pipelines call it, so
the sweep compares the graph with PyTorch's original list form.

Shapes (``ARGUMENT_RULES``, joined to ``argument_rules.RULES``):

- Z-Image: ``x`` ``[batch, in_channels, 1, height, width]`` (its pipelines add a frame axis of
  1 to image latents), ``cap_feats`` ``[batch, sequence_length, cap_feat_dim]``, ``t`` float32
  ``[batch]`` (a fraction in [0, 1]: the model scales it by ``t_scale``); out ``out_sample``
  ``[batch, in_channels, 1, height, width]``. Its ControlNet adds ``control_context``
  ``[batch, control_in_dim, 1, height, width]`` and gives ``controlnet_block_samples.{layer}``.
- JoyImage Edit Plus: ``shape_list`` int64 ``[batch, num_components, 3]``, each row's (t, h, w)
  grids, (0, 0, 0) for none; ``hidden_states`` ``[batch, image_sequence_length, channels, pt,
  ph, pw]``, its packed patches.
- OmniGen: one input image per row, ``input_img_latents`` ``[batch, channels, input_height,
  input_width]`` and ``input_image_sizes`` int64 ``[batch, 2]`` (its span of prompt tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mobius.diffusers.tasks import (
    HEIGHT,
    IMAGE_SEQUENCE,
    INPUT_HEIGHT,
    INPUT_WIDTH,
    PATCHES,
    TEXT_TIME_IMAGE,
    WIDTH,
)
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = None  # the model's dtype
STACKED = "takes_stacked_lists"  # set on a model whose override takes the stacked tensors
COMPONENTS = "num_components"  # JoyImage Edit Plus: the grids of a row (target, references)


def _rows(value: torch.Tensor) -> list[torch.Tensor]:
    """One tensor per sample."""
    return list(value.unbind(0))


def _grids(value: torch.Tensor) -> list[list[tuple[int, ...]]]:
    """Each row's (t, h, w) grids as Python tuples, less the (0, 0, 0) padding."""
    return [[tuple(grid) for grid in row if any(grid)] for row in value.tolist()]


def _image_rows(value: torch.Tensor) -> list[torch.Tensor]:
    """One ``[1, ...]`` tensor per sample (OmniGen's input latents keep a batch axis)."""
    return list(value.split(1))


def _spans(value: torch.Tensor) -> dict[int, list[tuple[int, ...]]]:
    """Each row's (start, end) span as OmniGen's ``{row: [(start, end)]}``."""
    return {row: [tuple(span)] for row, span in enumerate(value.tolist())}


# each class's list arguments, and how a stacked tensor becomes diffusers' Python form
LISTS: dict[str, dict[str, Callable[[torch.Tensor], Any]]] = {
    "ZImageTransformer2DModel": {"x": _rows, "cap_feats": _rows},
    "JoyImageEditPlusTransformer3DModel": {"shape_list": _grids},
    "ZImageControlNetModel": {"x": _rows, "cap_feats": _rows, "control_context": _rows},
    "OmniGenTransformer2DModel": {"input_img_latents": _image_rows, "input_image_sizes": _spans},
    "WanAnimate2Transformer3DModel": {
        "hidden_states": _rows,
        "encoder_hidden_states": _rows,
        "condition_latents": _rows,
    },
}


def _z_image_latents(name: str, channels_key: str) -> Callable[[Any], TensorSpec]:
    """Image latents with a frame axis of 1; a ControlNet reads the transformer's channels."""

    def rule(cfg: Any) -> TensorSpec:
        channels = cfg.get(channels_key) or _transformer(cfg).get(channels_key) or 16
        return TensorSpec(name, FLOAT, (BATCH, channels, 1, HEIGHT, WIDTH))

    return rule


def _transformer(cfg: Any) -> dict:
    """The config of the transformer a ControlNet runs on (``shared_modules``), or {}."""
    from mobius.diffusers.shared_modules import SHARED_CONFIG

    return cfg.get(SHARED_CONFIG) or {}


def _captions(cfg: Any) -> TensorSpec:
    width = cfg.get("cap_feat_dim") or _transformer(cfg).get("cap_feat_dim") or 2560
    return TensorSpec("cap_feats", FLOAT, (BATCH, SEQUENCE, width))


def _joyimage_patches(cfg: Any) -> TensorSpec:
    """The packed patches of every grid of a row, padded to the longest row."""
    patch = tuple(cfg.get("patch_size") or (1, 2, 2))
    channels = cfg.get("in_channels") or 16
    return TensorSpec("hidden_states", FLOAT, (BATCH, IMAGE_SEQUENCE, channels, *patch))


ARGUMENT_RULES: dict[tuple[str, str], Callable[[Any], TensorSpec]] = {
    ("ZImageTransformer2DModel", "x"): _z_image_latents("x", "in_channels"),
    ("ZImageTransformer2DModel", "cap_feats"): _captions,
    ("ZImageTransformer2DModel", "t"): lambda _cfg: TensorSpec("t", torch.float32, (BATCH,)),
    ("ZImageControlNetModel", "x"): _z_image_latents("x", "in_channels"),
    ("ZImageControlNetModel", "cap_feats"): _captions,
    ("ZImageControlNetModel", "t"): lambda _cfg: TensorSpec("t", torch.float32, (BATCH,)),
    ("ZImageControlNetModel", "control_context"): _z_image_latents(
        "control_context", "control_in_dim"),
    ("JoyImageEditPlusTransformer3DModel", "hidden_states"): _joyimage_patches,
    ("JoyImageEditPlusTransformer3DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, SEQUENCE, cfg.get("text_dim") or 4096)),
    ("JoyImageEditPlusTransformer3DModel", "encoder_hidden_states_mask"): lambda _cfg: TensorSpec(
        "encoder_hidden_states_mask", torch.bool, (BATCH, SEQUENCE)),
    ("JoyImageEditPlusTransformer3DModel", "shape_list"): lambda _cfg: TensorSpec(
        "shape_list", torch.int64, (BATCH, COMPONENTS, 3)),
    ("OmniGenTransformer2DModel", "input_ids"): lambda _cfg: TensorSpec(
        "input_ids", torch.int64, (BATCH, SEQUENCE)),
    ("OmniGenTransformer2DModel", "input_img_latents"): lambda cfg: TensorSpec(
        "input_img_latents", FLOAT, (BATCH, cfg.get("in_channels") or 4, INPUT_HEIGHT,
                                     INPUT_WIDTH)),
    ("OmniGenTransformer2DModel", "input_image_sizes"): lambda _cfg: TensorSpec(
        "input_image_sizes", torch.int64, (BATCH, 2)),
    ("OmniGenTransformer2DModel", "attention_mask"): lambda _cfg: TensorSpec(
        "attention_mask", FLOAT, (BATCH, TEXT_TIME_IMAGE, TEXT_TIME_IMAGE)),
    ("OmniGenTransformer2DModel", "position_ids"): lambda _cfg: TensorSpec(
        "position_ids", torch.int64, (BATCH, TEXT_TIME_IMAGE)),
}  # fmt: skip

# optional in the signature, passed by the pipelines all the same
NEEDED: dict[str, set[str]] = {
    "JoyImageEditPlusTransformer3DModel": {"encoder_hidden_states_mask", "shape_list"},
}


def per_sample(cls: type, model: torch.nn.Module, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each list argument of ``cls`` in diffusers' Python form, unless ``model``
    takes the stacked tensors (its override installed)."""
    forms = LISTS.get(cls.__name__, {})
    if not forms or getattr(model, STACKED, False):
        return kwargs
    return {k: forms[k](v) if k in forms else v for k, v in kwargs.items()}


def stacked(cls: type, output: Any) -> Any:
    """``output`` with a per-sample list field stacked on a new batch axis (a list class's)."""
    if cls.__name__ not in LISTS or not hasattr(output, "keys"):
        return output
    if all(isinstance(k, int) for k in output):  # a ControlNet's hints by transformer layer
        return {f"controlnet_block_samples.{k}": v for k, v in output.items()}
    for key, value in output.items():
        if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            output[key] = torch.stack(value)
    return output


# rows of grids the sweep feeds JoyImage Edit Plus, cycled over the batch: a padded row, a full
# row of 10 patches, a two-frame target without reference
JOYIMAGE_GRIDS = (((1, 2, 2), (1, 1, 3)), ((1, 2, 3), (1, 2, 2)), ((2, 1, 2), (0, 0, 0)))


def joyimage_grids(sizes: dict, _gen: Any) -> dict[str, torch.Tensor]:
    """``shape_list`` for the sweep: each row's grids fit ``image_sequence_length`` patches."""
    rows = [JOYIMAGE_GRIDS[r % len(JOYIMAGE_GRIDS)] for r in range(sizes[BATCH])]
    if any(sum(t * h * w for t, h, w in row) > sizes[IMAGE_SEQUENCE] for row in rows):
        raise ValueError("JoyImage Edit Plus: the grids fed hold more patches than the input")
    return {"shape_list": torch.tensor(rows, dtype=torch.int64)}


OMNIGEN_PATCH = 2  # the swept OmniGen config's patch size (the sweep's spans assume it)


def omnigen_layout(sizes: dict, _gen: Any) -> dict[str, torch.Tensor]:
    """OmniGen's mask, positions and image spans for the sweep, as its processor builds them
    (``OmniGenMultiModalProcessor``): odd rows left-padded by one token; causal attention over
    the prompt and the time token, the output image's patches attending to everything valid,
    the input image's span attending within itself; each row's span placed after its padding."""
    batch, text, patches = sizes[BATCH], sizes[SEQUENCE], sizes[PATCHES]
    span = (sizes[INPUT_HEIGHT] // OMNIGEN_PATCH) * (sizes[INPUT_WIDTH] // OMNIGEN_PATCH)
    length = text + 1 + patches
    masks, positions, spans = [], [], []
    for row in range(batch):
        pad = row % 2
        valid = text - pad
        mask = torch.zeros(length, length)
        mask[:pad] = 1.0  # padding rows attend to everything, as the processor's
        mask[pad : pad + valid + 1, pad : pad + valid + 1] = torch.tril(
            torch.ones(valid + 1, valid + 1)
        )
        mask[pad + valid + 1 :, pad:] = 1.0
        start = pad + (1 if valid - 1 >= span else 0)
        if start + span > text:
            raise ValueError("OmniGen: the input image's span is longer than the prompt fed")
        mask[start : start + span, start : start + span] = 1.0
        masks.append(mask)
        positions.append([0] * pad + list(range(valid + patches + 1)))
        spans.append([start, start + span])
    return {
        "attention_mask": torch.stack(masks),
        "position_ids": torch.tensor(positions, dtype=torch.int64),
        "input_image_sizes": torch.tensor(spans, dtype=torch.int64),
    }
