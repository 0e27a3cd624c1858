"""A transformer whose forward runs in modes named by a Python string, one filling a KV cache
object and one reading it: one graph per mode, the cache as named graph outputs of the first and
inputs of the second.

Wan Animate 2's pipeline runs, per segment of the driving video, one reference pass
(``kv_cache_mode="extract"``: the driving segment's latents, each layer's self-attention key and
value stored, before rotary, in a ``WanAnimate2KVCache``), then every denoising step
(``kv_cache_mode="cached"``: the noisy latents, one frame more than the reference, attending to
the cached reference tokens). Graphs (``mobius/diffusers/overrides/wan_animate2.py`` traces them):

- ``transformer_extract``: ``hidden_states`` ``[batch, out_dim, num_frames, height, width]``,
  ``timestep`` ``[batch]`` (read as 1, as the model does), ``encoder_hidden_states`` ``[batch,
  sequence_length, text_dim]`` (at most ``text_len`` tokens), ``condition_latents`` ``[batch,
  in_dim - out_dim, num_frames, height, width]``, ``encoder_hidden_states_image`` ``[batch,
  image_sequence_length, 1280]`` (under ``use_img_emb``) -> ``out_sample`` (the model's
  ``sample``), and per layer ``kv_cache.{layer}.key`` and ``kv_cache.{layer}.value`` ``[batch,
  reference_length, num_heads, head_dim]`` (the cache's own layout, one token per patch).
- ``transformer_cached``: the same inputs for the generation latents and the cache tensors as
  inputs under the same names (``reference_length`` = (``num_frames`` - 1) patch frames of the
  generation's patch grid, as the pipeline makes them) -> ``out_sample``.
- ``transformer_cached_uncondition``: ``cached`` with ``is_uncondtion`` true (the unconditional
  branch of guidance skips block 9): only for configs of more than 9 layers.

The lists become stacked tensors (``list_args``); ``seq_len``, the grids and the full video's
size (``origin_len``, ``origin_area``) are the values the pipeline computes from the latents'
sizes: the batched forward derives them itself, and PyTorch's forward is passed them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch

from mobius.diffusers import list_args
from mobius.diffusers.tasks import (
    FRAMES,
    HEIGHT,
    IMAGE_SEQUENCE,
    REFERENCE_TOKENS,
    WIDTH,
    DiffusersTask,
)
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

MODEL = "WanAnimate2Transformer3DModel"
EXTRACT, CACHED = "extract", "cached"
SKIPPED_BLOCK = 9  # the block the unconditional branch skips
CLIP_WIDTH = 1280  # the image projection's input, fixed by the class
FLOAT = None  # the model's dtype


def cache_names(layers: int) -> list[str]:
    """The cache's tensors, layer by layer: ``kv_cache.{layer}.key``, ``kv_cache.{layer}.value``."""
    return [f"kv_cache.{i}.{part}" for i in range(layers) for part in ("key", "value")]


def _specs(cfg: Any, mode: str) -> list[TensorSpec]:
    latent = cfg.get("out_dim", 16)
    specs = [
        TensorSpec("hidden_states", FLOAT, (BATCH, latent, FRAMES, HEIGHT, WIDTH)),
        TensorSpec("timestep", torch.float32, (BATCH,)),
        TensorSpec("encoder_hidden_states", FLOAT, (BATCH, SEQUENCE, cfg.get("text_dim", 4096))),
        TensorSpec("condition_latents", FLOAT,
                   (BATCH, cfg.get("in_dim", 36) - latent, FRAMES, HEIGHT, WIDTH)),
    ]  # fmt: skip
    if cfg.get("use_img_emb", True):
        specs.append(
            TensorSpec("encoder_hidden_states_image", FLOAT, (BATCH, IMAGE_SEQUENCE, CLIP_WIDTH))
        )
    if mode == CACHED:
        heads = cfg.get("num_heads", 40)
        head_dim = cfg.get("dim", 5120) // heads
        specs += [
            TensorSpec(name, FLOAT, (BATCH, REFERENCE_TOKENS, heads, head_dim))
            for name in cache_names(cfg.get("num_layers", 40))
        ]
    return specs


@contextlib.contextmanager
def uncompiled_block_masks() -> Iterator[None]:
    """diffusers' ``BlockMask`` built without ``torch.compile``: the same mask, without the
    ~12 s of inductor a compiled builder costs on CPU per new geometry."""
    import diffusers.models.transformers.transformer_wan_animate_2 as module

    original = module.create_block_mask

    def build(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **(kwargs | {"_compile": False}))

    with mock.patch.object(module, "create_block_mask", build):
        yield


def pipeline_values(cfg: Any, x: dict[str, torch.Tensor], mode: str) -> dict[str, Any]:
    """What the pipeline passes beside the latents, from their sizes: ``seq_len`` (the patch
    count), the reference's grid (the latents' own under extract; the cache's frames at the
    generation's area under cached, with the full video's ``origin_len`` and ``origin_area`` in
    pixels: 4x the frames less 3, 8x the latents' sides), one grid row per sample."""
    batch, _, frames, height, width = x["hidden_states"].shape
    pt, ph, pw = cfg.patch_size
    grid = [frames // pt, height // ph, width // pw]
    values: dict[str, Any] = {"seq_len": grid[0] * grid[1] * grid[2]}
    if mode == EXTRACT:
        values["offset_grid_sizes"] = torch.tensor([grid] * batch)
        return values
    reference = [x["kv_cache.0.key"].shape[1] // (grid[1] * grid[2]), grid[1], grid[2]]
    values["reference_grid_sizes"] = torch.tensor([reference] * batch)
    values["origin_len"] = 4 * (reference[0] - 1) + 1
    values["origin_area"] = [8 * height, 8 * width]
    return values


class CacheModeTask(DiffusersTask):
    """One ``kv_cache_mode`` of the transformer (and the unconditional branch's variant)."""

    def __init__(self, mode: str, uncondition: bool = False) -> None:
        self.mode, self.uncondition = mode, uncondition
        name = f"transformer_{mode}" + ("_uncondition" if uncondition else "")
        super().__init__(name, lambda cfg: _specs(cfg, mode), self._run, ())

    def supports(self, config: ArchitectureConfig) -> bool:
        return not self.uncondition or config.hf_config.get("num_layers", 40) > SKIPPED_BLOCK

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        layers = config.hf_config.get("num_layers", 40)
        return ["out_sample", *(cache_names(layers) if self.mode == EXTRACT else [])]

    def _run(self, model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
        from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

        layers = model.config.num_layers
        cache = WanAnimate2KVCache(layers)
        if self.mode == CACHED:
            for i in range(layers):
                cache.get(i).store(x[f"kv_cache.{i}.key"], x[f"kv_cache.{i}.value"])
        kwargs = {k: v for k, v in x.items() if not k.startswith("kv_cache.")}
        kwargs = list_args.per_sample(type(model), model, kwargs)
        kwargs |= {"kv_cache": cache, "kv_cache_mode": self.mode,
                   "is_uncondtion": self.uncondition, "return_dict": True}  # fmt: skip
        if getattr(model, list_args.STACKED, False):  # the batched forward derives the rest
            output = model(**kwargs)
        else:
            kwargs |= pipeline_values(model.config, x, self.mode)
            with uncompiled_block_masks():
                output = model(**kwargs)
        sample = list_args.stacked(type(model), output)["sample"]
        if self.mode == CACHED:
            return (sample,)
        return (sample, *(t for i in range(layers) for t in cache.get(i).get()))


def cache_mode_tasks(name: str) -> list[DiffusersTask] | None:
    """The graphs of ``name`` by cache mode (each config keeps those it has: ``supports``), or
    None when ``name`` runs in no such modes."""
    if name != MODEL:
        return None
    return [CacheModeTask(EXTRACT), CacheModeTask(CACHED), CacheModeTask(CACHED, True)]
