"""Cosmos 3's omni transformer (``Cosmos3OmniTransformer``) as its pipeline calls it: one vision
item per call, the prompt's tokens first and the item's patch tokens after them in one packed
sequence.

The forward takes the item as Python lists (``vision_tokens``, its (t, h, w) patch grid in
``vision_token_shapes``, its noisy frames in ``vision_noisy_frame_indexes``), the prefix length
``und_len`` and the packed length ``sequence_length`` as Python ints, and index tensors placing
each modality in the sequence. ``Cosmos3OmniPipeline`` always passes a list of one item: its
latents ``[1, latent_channel, frames, height, width]``, the prompt's ``len(input_ids)`` tokens at
``[0, und_len)``, the item's ``frames * ceil(height / p) * ceil(width / p)`` patches right after
them, and the predictions read back at the patches of the noisy frames. So the graph fixes one item
and takes (named after the forward's arguments, each list's member ``{name}.{i}`` as
``structured_args`` names them):

- ``input_ids`` int64 ``[sequence_length]``: the prompt (``und_len`` is its length);
- ``position_ids`` float32 ``[3, cosmos3_joint_length]``: each packed token's (t, h, w) rotary
  position (floats: the pipeline's fps modulation scales time), ``cosmos3_joint_length`` = prompt
  tokens + patches;
- ``vision_tokens.0`` ``[1, latent_channel, num_frames, height, width]``: the item's latents;
- ``vision_noisy_frame_indexes.0`` int64 ``[noisy_frames]``: the item's noisy frames, increasing
  (the other frames are conditioning);
- ``vision_timesteps`` float32 ``[noisy_tokens]``: a timestep per patch of the noisy frames.

and derives the rest in the graph as the pipeline does (``DERIVED``): ``und_len``, the grid,
``sequence_length``, ``text_indexes`` and ``vision_sequence_indexes`` (consecutive ranges) and
``vision_mse_loss_indexes`` (the noisy frames' patches). The output is the list of one
prediction, ``sample.0`` ``[1, latent_channel, num_frames, height, width]`` (zeros at the
conditioning frames, as the model gives them). The sound and action branches are optional
arguments its default (video) path does not pass (``enable_sound`` off, no action): the graph
leaves them out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from mobius.diffusers.axes import FRAMES, HEIGHT, WIDTH
from mobius.diffusers.family_sizes import JOINT, NOISY_FRAMES, NOISY_TOKENS, cosmos3_grid
from mobius.tasks.base import SEQUENCE, TensorSpec

MODEL = "Cosmos3OmniTransformer"
FLOAT = None  # the model's dtype


ITEMS = 1  # vision items per call (the pipeline's lists hold one)
TOKENS, NOISY = "vision_tokens.0", "vision_noisy_frame_indexes.0"  # the item's list members


def vision_tokens(cfg: Any, name: str) -> TensorSpec:
    """The item's latents, as the pipeline makes them (a batch of 1)."""
    channels = cfg.get("latent_channel") or 48
    return TensorSpec(name, FLOAT, (1, channels, FRAMES, HEIGHT, WIDTH))


def noisy_frame_indexes(_cfg: Any, name: str) -> TensorSpec:
    """The item's noisy frames, increasing."""
    return TensorSpec(name, torch.int64, (NOISY_FRAMES,))


ARGUMENT_RULES: dict[tuple[str, str], Callable[[Any], TensorSpec]] = {
    (MODEL, "input_ids"): lambda _cfg: TensorSpec("input_ids", torch.int64, (SEQUENCE,)),
    (MODEL, "position_ids"): lambda _cfg: TensorSpec("position_ids", torch.float32, (3, JOINT)),
    (MODEL, "vision_timesteps"): lambda _cfg: TensorSpec(
        "vision_timesteps", torch.float32, (NOISY_TOKENS,)),
}  # fmt: skip


def _item_grid(cfg: Any, x: dict[str, torch.Tensor]) -> tuple[Any, Any, Any]:
    _, _, frames, height, width = x[TOKENS].shape
    return cosmos3_grid(cfg, frames, height, width)


def _und_len(_cfg: Any, x: dict[str, torch.Tensor]) -> Any:
    return x["input_ids"].shape[0]


def _patches(cfg: Any, x: dict[str, torch.Tensor]) -> Any:
    return math.prod(_item_grid(cfg, x))


def _sequence_length(cfg: Any, x: dict[str, torch.Tensor]) -> Any:
    return _und_len(cfg, x) + _patches(cfg, x)


def _text_indexes(_cfg: Any, x: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.arange(x["input_ids"].shape[0], device=x["input_ids"].device)


def _vision_sequence_indexes(cfg: Any, x: dict[str, torch.Tensor]) -> torch.Tensor:
    start = _und_len(cfg, x)
    return torch.arange(start, start + _patches(cfg, x), device=x["input_ids"].device)


def _vision_mse_loss_indexes(cfg: Any, x: dict[str, torch.Tensor]) -> torch.Tensor:
    """Every patch of each noisy frame, frame by frame (``_prepare_vision_segment``)."""
    _, rows, cols = _item_grid(cfg, x)
    noisy = x[NOISY]
    stride = rows * cols
    within = torch.arange(stride, device=noisy.device)
    return ((noisy * stride)[:, None] + within[None, :]).flatten() + _und_len(cfg, x)


DERIVED: dict[tuple[str, str], Callable[[Any, dict[str, torch.Tensor]], Any]] = {
    (MODEL, "und_len"): _und_len,
    (MODEL, "sequence_length"): _sequence_length,
    (MODEL, "text_indexes"): _text_indexes,
    (MODEL, "vision_token_shapes"): lambda cfg, x: [_item_grid(cfg, x)],
    (MODEL, "vision_sequence_indexes"): _vision_sequence_indexes,
    (MODEL, "vision_mse_loss_indexes"): _vision_mse_loss_indexes,
}

FPS = 24.0  # the frame rate the feeds' positions are laid out at (the config's base_fps)
TEMPORAL_COMPRESSION = 4  # the pipeline's VAE's frames per latent frame


def pipeline_layout(cfg: Any, sizes: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Inputs laid out as the pipeline lays them out: the prompt's and the item's rotary
    positions (``get_3d_mrope_ids_text_tokens`` / ``get_3d_mrope_ids_vae_tokens``), a random
    choice of noisy frames (every frame but one, increasing) and a timestep in [10, 910) per
    noisy patch."""
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (
        get_3d_mrope_ids_text_tokens,
        get_3d_mrope_ids_vae_tokens,
    )

    text = sizes[SEQUENCE]
    frames, rows, cols = cosmos3_grid(cfg, sizes[FRAMES], sizes[HEIGHT], sizes[WIDTH])
    fps_modulation = cfg.get("enable_fps_modulation", True)
    text_ids, offset = get_3d_mrope_ids_text_tokens(text, 0, use_float_positions=fps_modulation)
    vision_ids, _ = get_3d_mrope_ids_vae_tokens(
        frames, rows, cols,
        offset + cfg.get("unified_3d_mrope_temporal_modality_margin", 15000),
        reset_spatial_indices=cfg.get("unified_3d_mrope_reset_spatial_ids", True),
        fps=FPS if fps_modulation else None, base_fps=float(cfg.get("base_fps", 24)),
        temporal_compression_factor=TEMPORAL_COMPRESSION,
    )  # fmt: skip
    noisy = sizes[NOISY_FRAMES]
    chosen = torch.randperm(frames, generator=gen)[:noisy].sort().values
    return {
        "position_ids": torch.cat([text_ids.float(), vision_ids.float()], dim=1),
        NOISY: chosen,
        "vision_timesteps": torch.rand(noisy * rows * cols, generator=gen) * 900 + 10,
    }
