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

from mobius.diffusers.tasks import HEIGHT, WIDTH
from mobius.tasks.base import BATCH, TensorSpec

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
