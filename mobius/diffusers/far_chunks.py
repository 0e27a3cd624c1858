"""AnyFlow FAR's chunked video: ``chunk_partition``, the Python list of frames per chunk that
lays out its causal attention, fixed per graph from the config.

``AnyFlowFARTransformer3DModel.forward`` takes ``chunk_partition`` (the frames of each chunk; a
token attends to its own chunk and the earlier ones) beside latents of ``sum(chunk_partition)``
frames. A list of ints sizes the sequence, the compressed context (the chunks before the last
``full_chunk_limit``, embedded by ``far_patch_embedding``) and the mask, so it is no graph input:
the graph is made for the config's ``chunk_partition`` (the pipeline's default), derived in the
graph as that constant, and its frame axes are static (``sum(chunk_partition)``). The graph is the
forward without a KV cache: the whole video at once, chunk-causal, giving the full-resolution
chunks' ``out_sample`` ``[batch, full frames, out_channels, height, width]``.
"""

from __future__ import annotations

from typing import Any

import torch

from mobius.diffusers.tasks import HEIGHT, WIDTH, DiffusersTask
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FAR = "AnyFlowFARTransformer3DModel"
DEFAULT_PARTITION = (1, 3, 3, 3, 3, 3, 3, 2)  # the class's default (81 frames, 21 latent)


def chunk_partition(cfg: Any) -> list[int]:
    """The config's frames per chunk."""
    return [int(n) for n in cfg.get("chunk_partition") or DEFAULT_PARTITION]


def _latents(cfg: Any) -> TensorSpec:
    frames = sum(chunk_partition(cfg))
    channels = cfg.get("in_channels") or 16
    return TensorSpec("hidden_states", None, (BATCH, frames, channels, HEIGHT, WIDTH))


def _per_frame(name: str) -> Any:
    return lambda cfg: TensorSpec(name, torch.float32, (BATCH, sum(chunk_partition(cfg))))


# latents frames first, as its forward takes them, and a source and a target timestep per frame
ARGUMENT_RULES = {
    (FAR, "hidden_states"): _latents,
    (FAR, "timestep"): _per_frame("timestep"),
    (FAR, "r_timestep"): _per_frame("r_timestep"),
}
DERIVED = {(FAR, "chunk_partition"): lambda cfg, _x: chunk_partition(cfg)}


# the pipeline's KV-cache buffers: [2 (key, value), batch, heads, length, head_dim], per block
FULL_CACHE = "full_cache_length"  # full_chunk_limit x the largest chunk's full-resolution tokens
COMPRESSED_CACHE = "compressed_cache_length"  # the compressed context's, as the pipeline sizes it
CACHE_AXES = {"full_cache": FULL_CACHE, "compressed_cache": COMPRESSED_CACHE}


def cache_lengths(cfg: Any, sizes: dict[str, int]) -> dict[str, int]:
    """The cache buffers' lengths at ``sizes``'s latent grid, as the pipeline allocates them (no
    entry for a config without ``chunk_partition``)."""
    if not cfg.get("chunk_partition"):
        return {}
    patch, compressed = cfg.get("patch_size") or (1, 2, 2), cfg.get("compressed_patch_size")
    compressed = compressed or (1, 4, 4)
    full_tokens = (sizes[HEIGHT] // patch[1]) * (sizes[WIDTH] // patch[2])
    compressed_tokens = (sizes[HEIGHT] // compressed[1]) * (sizes[WIDTH] // compressed[2])
    chunks, limit = chunk_partition(cfg), cfg.get("full_chunk_limit") or 3
    return {
        FULL_CACHE: limit * max(chunks) * full_tokens,
        COMPRESSED_CACHE: max(len(chunks) - limit + 1, 1) * max(chunks) * compressed_tokens,
    }


def _cached_frames(cfg: Any, chunk: int, cache_step: bool) -> dict[str, int]:
    """Frames of each cache the call reads (the step of chunk ``chunk``) or writes (the cache
    step over the first ``chunk`` chunks), by the forward's arithmetic."""
    chunks, limit = chunk_partition(cfg), cfg.get("full_chunk_limit") or 3
    if cache_step:  # _forward_cache: full_chunk_limit - 1 full chunks, the earlier compressed
        compressed = max(chunk - (limit - 1), 0)
        return {"compressed_cache": sum(chunks[:compressed]),
                "full_cache": sum(chunks[compressed:chunk])}  # fmt: skip
    total = chunk + 1  # _forward_inference: this chunk and full_chunk_limit - 1 cached ones
    compressed = total - limit if total >= limit else 0
    full = (limit if total >= limit else total) - 1
    return {"compressed_cache": sum(chunks[:compressed]),
            "full_cache": sum(chunks[compressed : compressed + full])}  # fmt: skip


# the chunk graphs a config may have: one per chunk of its chunk_partition (``supports``)
MAX_CHUNKS = 64


class ChunkTask(DiffusersTask):
    """One call of the pipeline's chunk loop at chunk index ``chunk``: its denoising step
    (``transformer_chunk_{k}``: the chunk's latents, attending to the cached chunks) or its
    cache step (``transformer_cache_{k}``: the clean latents of the first ``k`` chunks, whose
    keys and values it writes over the buffers' first tokens)."""

    def __init__(self, chunk: int, cache_step: bool) -> None:
        self.chunk, self.cache_step = chunk, cache_step
        kind = "cache" if cache_step else "chunk"
        super().__init__(f"transformer_{kind}_{chunk}", self._specs, self._call_model, ())

    def supports(self, config: Any) -> bool:
        return self.chunk < len(chunk_partition(config.hf_config))

    def _frames(self, cfg: Any) -> int:
        chunks = chunk_partition(cfg)
        return sum(chunks[: self.chunk]) if self.cache_step else chunks[self.chunk]

    def _caches(self, cfg: Any) -> list[str]:
        """The buffers the call reads or writes (none where it touches no token of one)."""
        frames = _cached_frames(cfg, self.chunk, self.cache_step)
        return [kind for kind in CACHE_AXES if frames[kind]]

    def _specs(self, cfg: Any) -> list[TensorSpec]:
        frames, channels = self._frames(cfg), cfg.get("in_channels") or 16
        heads, head_dim = cfg.get("num_attention_heads"), cfg.get("attention_head_dim")
        text = cfg.get("text_dim") or 4096
        specs = [
            TensorSpec("hidden_states", None, (BATCH, frames, channels, HEIGHT, WIDTH)),
            TensorSpec("timestep", torch.float32, (BATCH, frames)),
            TensorSpec("r_timestep", torch.float32, (BATCH, frames)),
            TensorSpec("encoder_hidden_states", None, (BATCH, SEQUENCE, text)),
        ]
        return specs + [
            TensorSpec(f"kv_cache.{layer}.{kind}", None, (2, BATCH, heads, CACHE_AXES[kind],
                                                          head_dim))
            for layer in range(cfg.get("num_layers")) for kind in self._caches(cfg)
        ]  # fmt: skip

    def outputs(self, config: Any) -> list[str]:
        if not self.cache_step:
            return ["out_sample"]
        cfg = config.hf_config
        return [f"out_kv_cache.{layer}.{kind}" for layer in range(cfg.get("num_layers"))
                for kind in self._caches(cfg)]  # fmt: skip

    def _call_model(self, model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
        cfg = model.config
        latents = x["hidden_states"]
        empty = latents.new_zeros(2, latents.shape[0], cfg.num_attention_heads, 0,
                                  cfg.attention_head_dim)  # fmt: skip
        # copies: the model writes its cache step into the buffers in place
        cache = {layer: {kind: x[f"kv_cache.{layer}.{kind}"].clone()
                         if f"kv_cache.{layer}.{kind}" in x else empty for kind in CACHE_AXES}
                 for layer in range(cfg.num_layers)}  # fmt: skip
        chunks = chunk_partition(cfg)
        sample, cache = model(
            hidden_states=latents,
            timestep=x["timestep"],
            r_timestep=x["r_timestep"],
            encoder_hidden_states=x["encoder_hidden_states"],
            chunk_partition=chunks[: self.chunk] if self.cache_step else chunks[: self.chunk + 1],
            kv_cache=cache,
            kv_cache_flag={
                "num_cached_chunks": self.chunk - self.cache_step,
                "is_cache_step": self.cache_step,
            },  # fmt: skip
            return_dict=False,
        )
        if not self.cache_step:
            return (sample,)
        return tuple(cache[layer][kind] for layer in range(cfg.num_layers)
                     for kind in self._caches(cfg))  # fmt: skip


def far_tasks(name: str, cls: type) -> list[DiffusersTask] | None:
    """AnyFlow FAR's graphs: its forward over the whole video (``transformer``), then per chunk
    of the config's ``chunk_partition`` the pipeline's denoising step, and per chunk but the
    last its cache step; None for any other class."""
    if name != FAR:
        return None
    from mobius.diffusers.generic import forward_task

    steps = [ChunkTask(chunk, cache_step=False) for chunk in range(MAX_CHUNKS)]
    caches = [ChunkTask(chunk, cache_step=True) for chunk in range(1, MAX_CHUNKS)]
    return [forward_task(cls), *steps, *caches]
