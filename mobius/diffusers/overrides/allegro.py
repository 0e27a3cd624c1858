"""AutoencoderKLAllegro: tiling on, the model's only implemented computation, each tile encoded
or decoded for every batch row at once.

Its ``_encode`` and ``_decode`` raise ``NotImplementedError`` unless ``use_tiling`` is set; the
computation diffusers implements, and Allegro's pipeline runs (``vae.enable_tiling()``), is
``tiled_encode`` / ``tiled_decode``: the video cut into kernels of (24 frames, ``sample_size``,
``sample_size``) at strides set by hard-coded overlaps (8 frames, 120 rows, 80 columns), each
tile encoded or decoded alone, the tiles blended by linear ramps over their overlaps. The tile
grid is a Python loop over ``floor((size - kernel) / stride) + 1`` tiles per axis, so each graph
is made for one grid (``mobius.diffusers.tiled_vae``).

Both loops copy each tile into a one-row buffer (``local_batch_size = 1``): past batch 1 the
copy fails (``expand(torch.FloatTensor{[2, 3, 24, 128, 128]}, size=[3, 24, 128, 128]): the
number of sizes provided (4) must be greater or equal to the number of dimensions in the tensor
(5)``), and diffusers runs a batch only with slicing on too (``enable_slicing``: row by row,
a Python loop over the batch). The encoder and decoder keep rows apart (their norms and
attention are per frame, their temporal convolutions per row), so the tiles here go through
them with every row at once: the same tiles, ramps and sums as diffusers' row by row, and the
batch stays dynamic. The sweep's PyTorch reference is diffusers' own, tiling and slicing on
(``mobius.verification.diffusers_feeds.AS_DESIGNED``: ``tiled_row_by_row``).
"""

from __future__ import annotations

import itertools
import math
import types
from typing import Any

import torch


def tiled_row_by_row(module: torch.nn.Module) -> None:
    """Diffusers' own batch path: tiling and slicing on (the parity reference)."""
    module.enable_tiling()
    module.enable_slicing()


def tiled_batched(module: torch.nn.Module) -> None:
    """Tiling on, each tile run for the whole batch (the graph)."""
    module.enable_tiling()
    module.tiled_encode = types.MethodType(_tiled_encode, module)
    module.tiled_decode = types.MethodType(_tiled_decode, module)


def _grid(self: Any, sizes: tuple[int, ...], ratios: tuple) -> tuple:
    """The kernel and stride at ``ratios`` (1 for the video, the compression ratios for
    latents), and the tile counts per axis of ``sizes`` at them (diffusers' arithmetic)."""
    kernel = [k // r for k, r in zip(self.kernel, ratios, strict=True)]
    stride = [s // r for s, r in zip(self.stride, ratios, strict=True)]
    counts = [math.floor((n - k) / s) + 1 for n, k, s in zip(sizes, kernel, stride, strict=True)]
    return counts, kernel, stride


def _ramp(index: int, count: int, overlap: int, length: int, like: torch.Tensor) -> torch.Tensor:
    """One axis's blend weights of tile ``index`` of ``count``: rising over the head overlap
    but for the first tile, falling over the tail overlap but for the last (``_prepare_for_blend``)."""
    step = torch.arange(0, overlap, device=like.device).float() / overlap
    ones = torch.ones(length - overlap, device=like.device)
    head = torch.cat([step, ones]) if index > 0 else torch.ones(length, device=like.device)
    tail = (
        torch.cat([ones, 1 - step]) if index < count - 1 else torch.ones(length, device=like.device)
    )
    return head * tail


def _blend_into(out: torch.Tensor, tile: torch.Tensor, index: tuple, counts, kernel, stride):
    """``out`` plus ``tile`` weighted by its ramps and padded to its place: the sum diffusers
    makes in place, without writes (a graph of in-place slice updates decomposes slowly)."""
    weights = [
        _ramp(i, c, k - s, k, tile)
        for i, c, k, s in zip(index, counts, kernel, stride, strict=True)
    ]
    ramped = tile * weights[0].reshape(-1, 1, 1) * weights[1].reshape(-1, 1) * weights[2]
    pads = []
    for i, s, k, n in reversed(list(zip(index, stride, kernel, out.shape[2:], strict=True))):
        pads += [i * s, n - i * s - k]
    return out + torch.nn.functional.pad(ramped, pads)


def _tiled_encode(self: Any, x: torch.Tensor) -> torch.Tensor:
    rs, rt = self.spatial_compression_ratio, self.config.temporal_compression_ratio
    batch, _, frames, height, width = x.shape
    counts, kernel, stride = _grid(self, (frames, height, width), (1, 1, 1))
    _, out_kernel, out_stride = _grid(self, (frames // rt, height // rs, width // rs), (rt, rs, rs))
    channels = 2 * self.config.latent_channels
    latent = x.new_zeros((batch, channels, frames // rt, height // rs, width // rs))
    for index in itertools.product(*(range(c) for c in counts)):
        (t, h, w), (kt, kh, kw) = [i * s for i, s in zip(index, stride, strict=True)], kernel
        tile = self.encoder(x[:, :, t : t + kt, h : h + kh, w : w + kw])
        latent = _blend_into(latent, tile, index, counts, out_kernel, out_stride)
    latent = self.quant_conv(latent.permute(0, 2, 1, 3, 4).flatten(0, 1))
    return latent.unflatten(0, (batch, -1)).permute(0, 2, 1, 3, 4)


def _tiled_decode(self: Any, z: torch.Tensor) -> torch.Tensor:
    rs, rt = self.spatial_compression_ratio, self.config.temporal_compression_ratio
    batch, _, frames, height, width = z.shape
    z = self.post_quant_conv(z.permute(0, 2, 1, 3, 4).flatten(0, 1))
    z = z.unflatten(0, (batch, -1)).permute(0, 2, 1, 3, 4)
    ratios = (rt, rs, rs)
    counts, kernel, stride = _grid(self, (frames, height, width), ratios)
    sizes = [n * r for n, r in zip((frames, height, width), ratios, strict=True)]
    _, out_kernel, out_stride = _grid(self, tuple(sizes), (1, 1, 1))
    video = z.new_zeros((batch, self.config.out_channels, *sizes))
    for index in itertools.product(*(range(c) for c in counts)):
        (t, h, w), (kt, kh, kw) = [i * s for i, s in zip(index, stride, strict=True)], kernel
        tile = self.decoder(z[:, :, t : t + kt, h : h + kh, w : w + kw])
        video = _blend_into(video, tile, index, counts, out_kernel, out_stride)
    return video.permute(0, 2, 1, 3, 4).contiguous()
