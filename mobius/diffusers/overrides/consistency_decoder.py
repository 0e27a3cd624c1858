"""ConsistencyDecoderVAE: decode with the scheduler's two steps unrolled by their position.

diffusers' scheduler finds the step's position with ``torch.where(self.timesteps == t)`` and
branches on it (the last step adds no noise): a branch on a tensor's value, which torch.export
cannot trace. The timesteps are fixed (``set_timesteps`` takes only 2 steps), so here they are
Python ints and the branch is on the loop's index; every other line is the model's own decode,
with the scheduler's per-timestep coefficients read once, as float32 values, and the noise drawn
with diffusers' ``randn_tensor`` as the original draws it (``mobius.diffusers.sampling`` feeds
those draws from the graph's ``noise`` input).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
import torch.nn.functional as F

STEPS = 2  # the only count ConsistencyDecoderScheduler.set_timesteps takes


def _value(table: torch.Tensor, index: int) -> float:
    return float(table[index])


def steps_by_index(model: torch.nn.Module) -> None:
    """Install ``decode`` with the scheduler's timesteps and coefficients as constants."""
    scheduler = model.decoder_scheduler
    scheduler.set_timesteps(STEPS, device="cpu")
    timesteps = [int(t) for t in scheduler.timesteps]
    model._mobius_steps = [
        {
            "t": t,
            "c_in": _value(scheduler.c_in, t),
            "c_out": _value(scheduler.c_out, t),
            "c_skip": _value(scheduler.c_skip, t),
        }
        for t in timesteps
    ]
    model._mobius_renoise = [
        (
            _value(scheduler.sqrt_alphas_cumprod, t),
            _value(scheduler.sqrt_one_minus_alphas_cumprod, t),
        )
        for t in timesteps[1:]
    ]  # the noise mixed into each step's result but the last, at the next step's level
    model._mobius_init_sigma = float(scheduler.init_noise_sigma)
    model.decode = types.MethodType(_decode, model)


def _decode(
    self: Any,
    z: torch.Tensor,
    generator: torch.Generator | None = None,
    return_dict: bool = True,
    num_inference_steps: int = STEPS,
) -> Any:
    from diffusers.models.autoencoders.vae import DecoderOutput

    if num_inference_steps != STEPS:
        raise ValueError("Currently more than 2 inference steps are not supported.")
    draw = sys.modules[type(self).__module__].randn_tensor  # looked up per call, as diffusers does
    z = (z * self.config.scaling_factor - self.means) / self.stds
    z = F.interpolate(
        z, mode="nearest", scale_factor=2 ** (len(self.config.block_out_channels) - 1)
    )
    batch_size, _, height, width = z.shape
    x_t = self._mobius_init_sigma * draw(
        (batch_size, 3, height, width), generator=generator, dtype=z.dtype, device=z.device
    )
    for index, step in enumerate(self._mobius_steps):
        model_input = torch.concat([x_t * step["c_in"], z], dim=1)
        model_output = self.decoder_unet(model_input, step["t"]).sample[:, :3, :, :]
        x_0 = step["c_out"] * model_output + step["c_skip"] * x_t
        if index == len(self._mobius_steps) - 1:
            x_t = x_0
        else:
            noise = draw(x_0.shape, generator=generator, dtype=x_0.dtype, device=x_0.device)
            keep, mix = self._mobius_renoise[index]
            x_t = keep * x_0 + mix * noise
    if not return_dict:
        return (x_t,)
    return DecoderOutput(sample=x_t)
