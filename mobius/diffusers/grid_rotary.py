"""Rotary tables pipelines compute from a latent grid's Python ints, computed in the graph from
the latents' (symbolic) size instead: the same arithmetic on tensors, in float64 where Python
computes in floats (``torch.round`` rounds half to even, as ``round`` does). Each is a derived
argument (``argument_rules.DERIVED``, entered in ``latent_grid.py``) and is checked against its
pipeline's own functions in the tests.
"""

from __future__ import annotations

from typing import Any

import torch


def scalar(size: Any, like: torch.Tensor) -> torch.Tensor:
    """A symbolic size as a float64 scalar tensor (``torch.tensor`` of it would fix it)."""
    return like.new_zeros((), dtype=torch.float64) + size


def linspace(start: torch.Tensor, end: torch.Tensor, steps: Any) -> torch.Tensor:
    """``torch.linspace`` in float32 from float64 ends, as its CPU kernel computes it: from the
    start for the first half, from the end for the rest (its vectorised loop adds the step to
    each lane's base, which can round an ulp apart: within 2e-6 of it in the tables)."""
    count = scalar(steps, start).float()
    start, end = start.float(), torch.where(count > 1, end.float(), start.float())
    index = torch.arange(steps, device=start.device, dtype=torch.float32)
    step = (end - start) / torch.clamp(count - 1, min=1)
    return torch.where(index < steps // 2, start + step * index, end - step * (steps - 1 - index))


def hunyuan_dit_rotary(cfg: Any, x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """HunyuanDiT's ``image_rotary_emb`` for the latents' grid (its pipeline's
    ``get_resize_crop_region_for_grid`` and ``get_2d_rotary_pos_embed``)."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed_from_grid

    latents = x["hidden_states"]
    p = cfg.get("patch_size") or 2
    rows, cols = latents.shape[-2] // p, latents.shape[-1] // p
    base = 512 // 8 // p
    h, w = scalar(rows, latents), scalar(cols, latents)
    tall = h / w > 1
    resized_h = torch.where(tall, base, torch.round(base / w * h))
    resized_w = torch.where(tall, torch.round(base / h * w), base)
    top, left = torch.round((base - resized_h) / 2.0), torch.round((base - resized_w) / 2.0)
    grid_h = linspace(top, (top + resized_h) * (h - 1) / h, rows)
    grid_w = linspace(left, (left + resized_w) * (w - 1) / w, cols)
    grid = torch.stack(torch.meshgrid(grid_w, grid_h, indexing="xy"), dim=0)
    head = cfg.get("attention_head_dim") or cfg.get("hidden_size") // cfg.get("num_attention_heads")
    return get_2d_rotary_pos_embed_from_grid(head, grid.reshape(2, 1, rows, cols), use_real=True)


# LuminaPipeline's defaults: scaling_watershed (the timestep below which the rotary table is
# scaled linearly, NTK-scaled from it on) and the VAE's down-sampling
LUMINA_WATERSHED, VAE_SCALE = 1.0, 8


def lumina_next_rotary(cfg: Any, x: dict[str, torch.Tensor]) -> torch.Tensor:
    """Lumina-Next's ``image_rotary_emb`` for the latents' grid and the batch's first timestep
    (its pipeline's ``get_2d_rotary_pos_embed_lumina(head_dim, 384, 384, linear_factor,
    ntk_factor)``, of which the model reads the grid's rows and columns): scaled by
    ``sqrt(height * width) / sample_size``, linearly below the watershed, by NTK from it on."""
    latents, timestep = x["hidden_states"], x["timestep"]
    p = cfg.get("patch_size") or 2
    rows, cols = latents.shape[-2] // p, latents.shape[-1] // p
    head = cfg.get("hidden_size") // cfg.get("num_attention_heads")
    area = scalar(latents.shape[-2] * VAE_SCALE, latents) * (latents.shape[-1] * VAE_SCALE)
    scaling = torch.sqrt(area / float((cfg.get("sample_size") * VAE_SCALE) ** 2))
    linear = timestep[0] < LUMINA_WATERSHED
    linear_factor = torch.where(linear, scaling, 1.0)
    ntk_factor = torch.where(linear, 1.0, scaling)
    dim = head // 2
    exponents = (
        torch.arange(0, dim, 2, dtype=torch.float32, device=latents.device)[: dim // 2] / dim
    )
    theta = (10000.0 * ntk_factor).float()
    freqs = 1.0 / theta**exponents / linear_factor.float()

    def axis(n: Any) -> torch.Tensor:
        angles = torch.outer(torch.arange(n, device=latents.device), freqs)
        return torch.polar(torch.ones_like(angles), angles)

    emb_h = axis(rows).view(rows, 1, head // 4, 1).expand(rows, cols, head // 4, 1)
    emb_w = axis(cols).view(1, cols, head // 4, 1).expand(rows, cols, head // 4, 1)
    return torch.cat([emb_h, emb_w], dim=-1).flatten(2)
