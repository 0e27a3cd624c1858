"""Frames folded into the batch with the frame count a Python int: unfolded at the graph's edge.

TransformerTemporalModel's ``forward`` and AutoencoderKLTemporalDecoder's ``decode`` take
``[batch * num_frames, ...]`` and ``num_frames`` as an int, which a trace would fix. The graph
takes the input unfolded, ``[batch, num_frames, ...]`` (the frames-first layout of the
Stable Video Diffusion pipeline's latents), folds it, reads ``num_frames`` from that axis, and
gives each output unfolded the same way: batch and frame count both stay dynamic.
"""

from __future__ import annotations

from typing import Any

import torch

from mobius.diffusers import tasks as dt
from mobius.tasks.base import BATCH, TensorSpec

FLOAT = None  # the model's dtype

# class -> the forward argument whose first axis folds [batch, num_frames]
FOLDED = {"TransformerTemporalModel": "hidden_states"}


def unfolded_spec(name: str, channels: int) -> TensorSpec:
    """``[batch, num_frames, channels, height, width]``."""
    return TensorSpec(name, FLOAT, (BATCH, dt.FRAMES, channels, dt.HEIGHT, dt.WIDTH))


def frame_count(x: dict[str, torch.Tensor], name: str) -> int | torch.SymInt:
    """The frames of the unfolded input ``name``."""
    return x[name].shape[1]


def unfold(cls: type, x: dict[str, torch.Tensor], outputs: tuple) -> tuple:
    """Each output's first axis ``batch * num_frames`` split as the folded input's was."""
    name = FOLDED.get(cls.__name__)
    if name is None:
        return outputs
    batch, frames = x[name].shape[:2]
    return tuple(out.unflatten(0, (batch, frames)) for out in outputs)


def _decoder_inputs(cfg: Any) -> list[TensorSpec]:
    return [unfolded_spec("latent_sample", cfg.get("latent_channels", 4))]


def _call_decoder(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    """SVD's VAE decoder: its temporal layers mix the ``num_frames`` frames of each clip."""
    latents = x["latent_sample"]
    decoded = model.decode(latents.flatten(0, 1), num_frames=latents.shape[1]).sample
    return (decoded.unflatten(0, latents.shape[:2]),)


def temporal_decoder_tasks(cls: type) -> list[dt.DiffusersTask]:
    """AutoencoderKLTemporalDecoder: the image encoder (frames as a batch of images) and the
    decoder on unfolded clips, ``latent_sample`` ``[batch, num_frames, channels, h, w]`` ->
    ``sample`` ``[batch, num_frames, 3, H, W]``."""
    encoder, _ = dt.vae_tasks(cls=cls)
    return [encoder, dt.DiffusersTask("vae_decoder", _decoder_inputs, _call_decoder, ("sample",))]
