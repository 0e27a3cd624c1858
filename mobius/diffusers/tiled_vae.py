"""VAEs whose only computation is tiled over a grid that Python loops count: one grid per graph.

AutoencoderKLAllegro encodes and decodes only tile by tile (``overrides/allegro.py`` turns
tiling on): kernels of (24 frames, ``sample_size``, ``sample_size``) at strides (16,
``sample_size - 120``, ``sample_size - 80``), ``floor((size - kernel) / stride) + 1`` tiles per
axis, each a Python loop, their outputs blended by ramps that depend on whether a tile is first
or last on its axis. A size that changes the tile count changes the unrolled graph, and one
that does not leaves the sizes past the last tile zero; frames, height and width are fixed per
graph, to ``TILES`` tiles per axis (two along the columns, so that the blend is in the graph),
the latents' sizes those divided by the compression ratios. Batch stays dynamic: each tile goes
through the encoder or decoder for every row at once (``overrides/allegro.py``).
"""

from __future__ import annotations

from typing import Any

from mobius.diffusers import tasks as dt
from mobius.tasks.base import TensorSpec

TILED_VAES = ("AutoencoderKLAllegro",)
TILES = (1, 1, 2)  # frames, rows, columns
KERNEL_FRAMES, OVERLAPS = 24, (8, 120, 80)  # AutoencoderKLAllegro.__init__'s constants


def tile_grid_sizes(cfg: Any, tiles: tuple[int, ...] = TILES) -> tuple[dict, dict]:
    """The encoder's and the decoder's fixed sizes: ``tiles`` kernels per axis at their strides,
    and those divided by the temporal and spatial compression ratios."""
    size = cfg.get("sample_size", 320)
    kernel = (KERNEL_FRAMES, size, size)
    video = [k + (k - o) * (n - 1) for k, o, n in zip(kernel, OVERLAPS, tiles, strict=True)]
    spatial = 2 ** (len(cfg.get("block_out_channels", (0,) * 4)) - 1)
    temporal = int(cfg.get("temporal_compression_ratio", 4))
    latent = [video[0] // temporal, video[1] // spatial, video[2] // spatial]
    axes = (dt.FRAMES, dt.HEIGHT, dt.WIDTH)
    return dict(zip(axes, video, strict=True)), dict(zip(axes, latent, strict=True))


def _fixed(specs: list[TensorSpec], sizes: dict[str, int]) -> list[TensorSpec]:
    return [TensorSpec(s.name, s.dtype, tuple(sizes.get(d, d) for d in s.dims)) for s in specs]


def tiled_vae_tasks(cls: type, tiles: tuple[int, ...] = TILES) -> list[dt.DiffusersTask]:
    """The VAE contract's two graphs, each at ``tiles`` tiles per axis; each keeps the contract's
    task (its named axes) as ``contract``, which the sweep reports the fixed sizes against."""
    tasks = []
    for task, which in zip(dt.vae_tasks(cls=cls), (0, 1), strict=True):  # video, latents
        fixed = dt.DiffusersTask(
            task.name,
            lambda cfg, task=task, which=which: _fixed(
                task._inputs(cfg), tile_grid_sizes(cfg, tiles)[which]
            ),
            task._call,
            task.output_names,
        )
        fixed.contract = task
        tasks.append(fixed)
    return tasks
