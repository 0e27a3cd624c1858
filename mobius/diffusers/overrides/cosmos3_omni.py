"""Cosmos 3's omni transformer: latents padded to whole patches without an ``if``, and the noisy
frames counted by their index tensor's size.

``Cosmos3OmniTransformer._patchify_and_pack_latents`` pads an item's latents to a multiple of
``latent_patch_size`` on height and width only ``if`` a side is not one already: the trace keeps
the branch of the traced sides, so a graph traced at even sides would drop the padding (and
misplace every patch) at odd ones. Padding by zero rows changes nothing, so the override always
pads (zeros at the bottom and right, as the model's own buffer). ``_unpatchify_and_unpack_latents``
counts an item's noisy frames with ``len()``, which makes the size a Python int: the trace fixes
it at the traced count; the override reads ``shape[0]`` (the same count, kept dynamic). The rest
is the model's code.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F


def always_pads(module: torch.nn.Module) -> None:
    def patchify_and_pack(self: Any, tokens_vision: list[torch.Tensor]) -> tuple:
        p = self.config.latent_patch_size
        channels = self.config.latent_channel
        packed, shapes = [], []
        for latent in tokens_vision:
            latent = latent.squeeze(0)  # [C, T, H, W]
            _, frames, height, width = latent.shape
            shapes.append((frames, height, width))
            rows, cols = (height + p - 1) // p, (width + p - 1) // p
            latent = F.pad(latent, (0, cols * p - width, 0, rows * p - height))
            latent = latent.reshape(channels, frames, rows, p, cols, p)
            latent = latent.permute(1, 2, 4, 3, 5, 0)  # einsum "cthpwq->thwpqc", a permutation
            packed.append(latent.reshape(-1, p * p * channels))
        return torch.cat(packed, dim=0), shapes

    module._patchify_and_pack_latents = types.MethodType(patchify_and_pack, module)
    module._unpatchify_and_unpack_latents = types.MethodType(_unpatchify_and_unpack, module)


def _unpatchify_and_unpack(self: Any, packed: torch.Tensor, token_shapes_vision: list,
                           noisy_frame_indexes_vision: list, original_latent_shapes: list) -> list:  # fmt: skip
    """Each item's predictions for its noisy frames put back on its latent grid, zeros at the
    conditioning frames (the model's own, counting the noisy frames by ``shape[0]``)."""
    p = self.config.latent_patch_size
    channels = self.config.latent_channel
    latents, start = [], 0
    for token_shape, noisy, (_, height, width) in zip(
        token_shapes_vision, noisy_frame_indexes_vision, original_latent_shapes, strict=True
    ):
        rows, cols = (height + p - 1) // p, (width + p - 1) // p
        count = noisy.shape[0] * rows * cols
        patches = packed[start : start + count].reshape(noisy.shape[0], rows, cols, p, p, channels)
        latent = patches.permute(5, 0, 1, 3, 2, 4)  # einsum "thwpqc->cthpwq"
        latent = latent.reshape(channels, noisy.shape[0], rows * p, cols * p)[:, :, :height, :width]
        out = packed.new_zeros((channels, token_shape[0], height, width))
        out[:, noisy] = latent
        latents.append(out.unsqueeze(0))
        start += count
    return latents
