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

from mobius.diffusers.axes import HEIGHT, WIDTH
from mobius.diffusers.family_sizes import COMPRESSED_CACHE, FULL_CACHE, chunk_partition
from mobius.diffusers.tasks import DiffusersTask
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FAR = "AnyFlowFARTransformer3DModel"


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
CACHE_AXES = {"full_cache": FULL_CACHE, "compressed_cache": COMPRESSED_CACHE}


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


def chunk_tasks() -> list[DiffusersTask]:
    """AnyFlow FAR's chunk-loop graphs: per chunk of the config's ``chunk_partition`` the
    pipeline's denoising step, and per chunk but the first its cache step (``supports`` keeps
    those of the config's chunks)."""
    steps = [ChunkTask(chunk, cache_step=False) for chunk in range(MAX_CHUNKS)]
    return steps + [ChunkTask(chunk, cache_step=True) for chunk in range(1, MAX_CHUNKS)]
