"""Bria FIBO 2: the Perceiver's gist-token count per prompt as a mask over a fixed number of
gist slots, and the rotary tables as real pairs."""

from __future__ import annotations

import types
from typing import Any

import torch


def gist_slots_by_mask(module: torch.nn.Module) -> None:
    # BriaFibo2Transformer2DModel.forward turns each prompt's length (`mask.sum(1).tolist()`,
    # or the padded length) into a gist-token count in Python (a linear map rounded up to a
    # multiple of gist_step, clamped to [min, max]), runs its Perceiver with the batch's largest
    # count and, where the counts differ, masks each row's extra gist tokens out of every
    # attention. A trace fixes the batch and the prompt length (the Python list) and the count
    # (a shape). Here the count is the same arithmetic on float64 tensors, and the Perceiver
    # always runs max_num_gist_tokens slots, each row's slots past its count masked out as keys:
    # a masked key adds nothing to a softmax, so every kept token's value is the model's (the
    # masked slots' own values are never read). The stream is always image then gist, the
    # order the model takes when it masks (positions come from the rotary ids, so the order
    # changes only float rounding). Its rotary tables are complex64 constants, which ONNX has no
    # initializer for: kept as (real, imaginary) pairs, made complex in the graph.
    rope = module.rope_embedder
    tables = rope.precompute_freqs_cis(rope.axes_dims, rope.axes_lens, theta=rope.theta)
    module.rope_pairs = [torch.view_as_real(t) for t in tables]
    module.forward = types.MethodType(_forward, module)


def _rotary(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """``RopeEmbedder.__call__``: each axis's table row by the token's id on that axis."""
    rows = [table.to(ids.device).index_select(0, ids[:, i].long())
            for i, table in enumerate(model.rope_pairs)]  # fmt: skip
    return torch.view_as_complex(torch.cat(rows, dim=1).contiguous())


def gist_counts(lengths: torch.Tensor, cfg: Any) -> torch.Tensor:
    """``compute_gist_count`` on a tensor of prompt lengths, in float64 as Python computes it."""
    span = cfg.gist_max_text_len - cfg.gist_min_text_len
    ratio = ((lengths.double() - cfg.gist_min_text_len) / span).clamp(0.0, 1.0)
    raw = cfg.min_num_gist_tokens + ratio * (cfg.max_num_gist_tokens - cfg.min_num_gist_tokens)
    quantized = torch.ceil(raw / cfg.gist_step) * cfg.gist_step
    return quantized.clamp(cfg.min_num_gist_tokens, cfg.max_num_gist_tokens).long()


def _forward(
    self: Any,
    hidden_states: torch.Tensor,
    timestep: torch.Tensor,
    encoder_hidden_states: torch.Tensor,
    encoder_attention_mask: torch.Tensor | None = None,
    context_latents: list[torch.Tensor] | None = None,
    return_dict: bool = True,
) -> Any:
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    cfg = self.config
    batch_size, channels, height, width = hidden_states.shape
    p = cfg.patch_size
    rows, cols = height // p, width // p
    image_tokens = rows * cols
    device = hidden_states.device
    adaln_noisy = self.t_embedder(timestep * cfg.t_scale)
    adaln_clean = self.t_embedder(torch.zeros_like(timestep))

    # the image on rotary plane max_num_gist_tokens + 1, context image k on the k-th after it
    image_plane = cfg.max_num_gist_tokens + 1
    tokens = [self._patchify(hidden_states)]
    ids = [self.create_coordinate_grid((1, rows, cols), (image_plane, 0, 0), device)]
    for k, latents in enumerate(context_latents or []):
        tokens.append(self._patchify(latents))
        size = (1, latents.shape[2] // p, latents.shape[3] // p)
        ids.append(self.create_coordinate_grid(size, (image_plane + k + 1, 0, 0), device))
    hidden_states = self.x_embedder(torch.cat(tokens, dim=1))
    image_freqs = _rotary(self, torch.cat([grid.flatten(0, 2) for grid in ids])).unsqueeze(0)
    image_noise = (torch.arange(hidden_states.shape[1], device=device) < image_tokens).long()
    refiner_noise = image_noise[None].expand(batch_size, -1) if context_latents else None
    for block in self.noise_refiner:
        hidden_states = block(hidden_states, None, image_freqs, adaln_input=adaln_noisy,
                              noise_mask=refiner_noise, adaln_noisy=adaln_noisy,
                              adaln_clean=adaln_clean)  # fmt: skip

    if encoder_attention_mask is None:
        lengths = torch.full((batch_size,), encoder_hidden_states.shape[2], device=device)
    else:
        lengths = encoder_attention_mask.sum(dim=1)
    slots = cfg.max_num_gist_tokens
    gist_mask = torch.arange(slots, device=device)[None, :] < gist_counts(lengths, cfg)[:, None]
    gist = self.perceiver(encoder_hidden_states[:, 0], slots, encoder_attention_mask, gist_mask)
    gist_ids = self.create_coordinate_grid((slots, 1, 1), (1, 0, 0), device).flatten(0, 2)
    gist_freqs = _rotary(self, gist_ids).unsqueeze(0)

    kept = torch.ones(batch_size, hidden_states.shape[1], dtype=torch.bool, device=device)
    attention_mask = torch.cat([kept, gist_mask], dim=1)
    noise_mask = torch.cat([image_noise[None].expand(batch_size, -1),
                            torch.zeros_like(gist_mask, dtype=torch.long)], dim=1)  # fmt: skip
    hidden_states = torch.cat([hidden_states, gist], dim=1)
    freqs_cis = torch.cat([image_freqs, gist_freqs], dim=1)
    bundle = {layer: i + 1 for i, layer in enumerate(cfg.injection_layer_ids)}
    for layer, block in enumerate(self.layers):
        text = encoder_hidden_states[:, bundle[layer]] if layer in bundle else None
        hidden_states = block(hidden_states, attention_mask, freqs_cis, noise_mask=noise_mask,
                              adaln_noisy=adaln_noisy, adaln_clean=adaln_clean,
                              encoder_hidden_states=text,
                              encoder_attention_mask=encoder_attention_mask)  # fmt: skip

    hidden_states = self.final_layer(hidden_states[:, :image_tokens], c=adaln_noisy)
    hidden_states = hidden_states.view(batch_size, rows, cols, channels, p, p)
    output = hidden_states.permute(0, 3, 1, 4, 2, 5).reshape(batch_size, channels, height, width)
    if not return_dict:
        return (output,)
    return Transformer2DModelOutput(sample=output)
