"""VAE decoders that sample: the noise they draw is a graph input.

A consistency decoder (ConsistencyDecoderVAE) decodes by denoising from random noise in a fixed
number of steps, drawing noise with diffusers' ``randn_tensor`` at the start and between steps;
LTX-2's diffusion video decoder draws one video-sized canvas that its last stage denoises.
A graph cannot draw the same numbers as a ``torch.Generator``, and a pipeline wants reproducible
images, so the decoder graph takes the draws: ``noise`` ``[noise_draws, batch, channels,
(sample_frames,) sample_height, sample_width]``, in the order the model draws them. The encoder,
where the class has one, is the plain ``vae_encoder``. PyTorch is checked with the same draws
(``drawing_from``).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from mobius.diffusers import tasks as dt
from mobius.tasks.base import BATCH, TensorSpec


class Sampler(NamedTuple):
    """How a sampling decoder draws: ``draws`` per decode, the modules whose ``randn_tensor``
    draws them, whether its images are video (``[batch, channels, frames, height, width]``, its
    latents too) and whether the class also encodes (a ``vae_encoder`` graph)."""

    draws: int
    modules: tuple[str, ...]
    video: bool = False
    encodes: bool = True


SAMPLING_DECODERS = {
    "ConsistencyDecoderVAE": Sampler(
        2,
        (
            "diffusers.models.autoencoders.consistency_decoder_vae",
            "diffusers.schedulers.scheduling_consistency_decoder",
        ),
    ),
    # LTX-2's diffusion decoder: one video-sized draw, the pixels its stage 5 denoises from (one
    # whatever num_inference_steps: later steps are Euler updates); it has no encoder
    "LTX2VideoDiffusionDecoderModel": Sampler(
        1, ("diffusers.models.autoencoders.ltx2_diffusion_decoder",), video=True, encodes=False
    ),
}
IMAGE_CHANNELS = 3  # the decoders draw RGB images unless their config says otherwise


def sampling_tasks(name: str, cls: type) -> list[dt.DiffusersTask] | None:
    """The encoder (where the class has one) and the noise-taking decoder of sampling VAE
    ``name``; None for other classes."""
    if name not in SAMPLING_DECODERS:
        return None
    sampler = SAMPLING_DECODERS[name]
    frames = (dt.SAMPLE_FRAMES,) if sampler.video else ()

    def inputs(cfg: Any) -> list[TensorSpec]:
        channels = cfg.get("out_channels") or IMAGE_CHANNELS
        noise = (sampler.draws, BATCH, channels, *frames, dt.SAMPLE_HEIGHT, dt.SAMPLE_WIDTH)
        return [*dt.vae_decoder_inputs(cfg, sampler.video), TensorSpec("noise", None, noise)]

    def call(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
        with drawing_from(x["noise"], sampler.modules):
            return dt.call_vae_decoder(model, x)

    decoder = dt.DiffusersTask("vae_decoder", inputs, call, ("sample",))
    return [dt.vae_tasks(cls=cls)[0], decoder] if sampler.encodes else [decoder]


@contextlib.contextmanager
def drawing_from(noise: torch.Tensor, modules: tuple[str, ...]) -> Iterator[None]:
    """diffusers' ``randn_tensor``, as ``modules`` call it, returns ``noise[0]``, ``noise[1]``, ...
    in turn, each the size the model asks for; every draw must be taken."""
    draws = list(noise.unbind(0))
    taken = 0

    def draw(shape: Any, generator: Any = None, device: Any = None, dtype: Any = None, **_: Any):
        nonlocal taken
        if taken == len(draws):
            raise ValueError(f"the decoder draws more noise than the {len(draws)} draws given")
        value = draws[taken]
        taken += 1
        if list(value.shape) != list(shape):  # a draw of another size would broadcast silently
            raise ValueError(
                f"noise draw {taken} is {list(value.shape)}, the decoder draws {list(shape)}"
            )
        return value if dtype is None else value.to(dtype)

    loaded = [importlib.import_module(m) for m in modules]
    originals = [m.randn_tensor for m in loaded]
    for module in loaded:
        module.randn_tensor = draw
    try:
        yield
    finally:
        for module, original in zip(loaded, originals, strict=True):
            module.randn_tensor = original
    if taken != len(draws):
        raise ValueError(f"the decoder drew {taken} of the {len(draws)} noise draws given")
