"""A bank of upscalers picked by a Python int: one graph per scale the bank holds.

Kandinsky 6 SR's ``Kandinsky6SRLatentUpscalerBank`` holds one upscaler per entry of its config's
``scales`` (its upscaler class takes 2 and 4 only: a 2x model, and a 2x+2x cascade), and
``forward(latents, scale)`` runs the one ``scale`` names, a Python int its pipeline passes
(``tiling_scale``: 2 for ``resolution_scale`` 2 and 2.25, 4 for 4). An int picking a module is no
tensor a graph can take, and the two upscalers share no weights, so each scale is a graph of its
own, traced with the scale fixed: ``latent_upscaler_x{scale}``, ``latents`` ``[batch,
in_channels, num_frames, height, width]`` (K-VAE latents times ``scaling_factor``) ->
``out_sample`` (its ``DecoderOutput``'s ``sample``, the generic contract's name) ``[batch,
in_channels, num_frames, scale * height, scale * width]``. A scale the config does not hold has
no graph (``supports``).
"""

from __future__ import annotations

from typing import Any

import torch

from mobius.diffusers.tasks import FRAMES, HEIGHT, WIDTH, DiffusersTask
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, TensorSpec

BANK = "Kandinsky6SRLatentUpscalerBank"
SCALES = (2, 4)  # the scales its upscaler class can be built for


def _latents(cfg: Any) -> list[TensorSpec]:
    channels = cfg.get("in_channels", 64)
    return [TensorSpec("latents", None, (BATCH, channels, FRAMES, HEIGHT, WIDTH))]


class ScaleTask(DiffusersTask):
    """The bank's upscaler for one scale."""

    def __init__(self, scale: int) -> None:
        self.scale = scale
        super().__init__(f"latent_upscaler_x{scale}", _latents, self._upscale, ("out_sample",))

    def supports(self, config: ArchitectureConfig) -> bool:
        return self.scale in tuple(config.hf_config.get("scales") or SCALES)

    def _upscale(self, model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
        return (model(x["latents"], scale=self.scale, return_dict=True).sample,)


def bank_tasks(name: str) -> list[DiffusersTask] | None:
    """One task per scale of bank class ``name`` (each config keeps those its ``scales`` holds:
    ``supports``), or None when ``name`` is no bank."""
    return [ScaleTask(scale) for scale in SCALES] if name == BANK else None
