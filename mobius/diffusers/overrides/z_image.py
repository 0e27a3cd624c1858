"""Z-Image: one batched pass over stacked samples instead of a Python loop over lists.

``ZImageTransformer2DModel.forward`` takes ``x`` and ``cap_feats`` as Python lists of per-sample
tensors, patchifies and pads each sample in a loop over the list (each sequence to a multiple of
32 tokens, ``SEQ_MULTI_OF``), and pads the batch to its longest sample: the loop fixes the batch
to the list's length, and its complex64 rotary tables (built on first call) are no ONNX
initializer. Here the samples are one stacked tensor each (``x`` ``[batch, channels, frames,
height, width]``, ``cap_feats`` ``[batch, tokens, cap_feat_dim]``), as a pipeline that feeds
equal-size samples has them, and every step is one batched operation: the same patch order, the
same padding (the pad rows are the model's pad token, as ``torch.where`` makes them), the same
positions (the caption at ``1 + i``, the image after the padded caption, pad rows at 0), and the
tables kept as (real, imaginary) float pairs. Equal-size samples need no attention mask,
diffusers drops it too. Only the basic mode is batched (one image per sample; the omni mode's
nested lists are refused).

``ZImageControlNetModel.forward`` loops the same way over ``x``, ``cap_feats`` and
``control_context``; its batched form shares the steps, and returns its hints keyed by the
transformer layer they are added to.
"""

from __future__ import annotations

import types
from typing import Any

import torch

SEQ_MULTI_OF = 32  # diffusers pads every sequence to a multiple of this


def _patchify(image: torch.Tensor, p: int, pf: int) -> torch.Tensor:
    """``[B, C, F, H, W]`` -> ``[B, (F/pf)(H/p)(W/p), pf * p * p * C]``, diffusers' token and
    feature order."""
    b, c, f, h, w = image.shape
    image = image.view(b, c, f // pf, pf, h // p, p, w // p, p)
    return image.permute(0, 2, 4, 6, 3, 5, 7, 1).reshape(b, -1, pf * p * p * c)


def _padded(tokens: torch.Tensor, pad_token: torch.Tensor) -> torch.Tensor:
    """``tokens`` ``[B, N, D]`` followed by ``pad_token`` up to a multiple of SEQ_MULTI_OF."""
    b, n, d = tokens.shape
    pad = (-n) % SEQ_MULTI_OF
    return torch.cat([tokens, pad_token.to(tokens.dtype).expand(b, pad, d)], dim=1)


def _positions(grid: tuple, start: Any, padded: int, device: torch.device) -> torch.Tensor:
    """The (frame, row, column) position of each token of a ``grid`` starting at frame
    ``start``, then (0, 0, 0) for the pad rows up to ``padded`` rows: ``[padded, 3]``."""
    axes = [torch.arange(n, device=device) for n in grid]
    axes[0] = axes[0] + start
    ids = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 3)
    pad = padded - ids.shape[0]
    return torch.cat([ids, ids.new_zeros(pad, 3)], dim=0)


def _rotary(tables: list[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """The complex rotary factors of positions ``ids`` ``[N, 3]``: each axis's table row
    (``RopeEmbedder.__call__``), from the tables kept as (real, imaginary) pairs."""
    pairs = torch.cat([t.to(ids.device)[ids[:, i]] for i, t in enumerate(tables)], dim=1)
    return torch.view_as_complex(pairs.contiguous())


def _tables(module: torch.nn.Module) -> list[torch.Tensor]:
    rope = module.rope_embedder
    tables = rope.precompute_freqs_cis(rope.axes_dims, rope.axes_lens, theta=rope.theta)
    return [torch.view_as_real(t) for t in tables]


def _embedded(self: Any, x: torch.Tensor, cap_feats: torch.Tensor, p: int, pf: int) -> tuple:
    """Both streams embedded and padded, and their rotary factors: (image tokens, image
    rotary, caption tokens, caption rotary, image token count, (F/pf, H/p, W/p))."""
    if isinstance(x, (list, tuple)):
        raise ValueError("the batched Z-Image forward takes stacked samples, not lists")
    device = x.device
    cap = _padded(self.cap_embedder(cap_feats), self.cap_pad_token)
    cap_len = cap.shape[1]
    cap_ids = _positions((cap_len, 1, 1), 1, cap_len, device)
    _, _, f, h, w = x.shape
    grid = (f // pf, h // p, w // p)
    image = self.all_x_embedder[f"{p}-{pf}"](_patchify(x, p, pf))
    tokens = image.shape[1]
    image = _padded(image, self.x_pad_token)
    image_ids = _positions(grid, cap_len + 1, image.shape[1], device)
    tables = self.rope_embedder.freqs_pairs
    freqs = (_rotary(tables, image_ids), _rotary(tables, cap_ids))
    batch = x.shape[0]
    image_freqs, cap_freqs = (f.unsqueeze(0).expand(batch, -1, -1) for f in freqs)
    return image, image_freqs, cap, cap_freqs, tokens, grid


def batched_transformer(module: torch.nn.Module) -> None:
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    def forward(
        self: Any,
        x: torch.Tensor,
        t: torch.Tensor,
        cap_feats: torch.Tensor,
        return_dict: bool = True,
        controlnet_block_samples: dict[int, torch.Tensor] | None = None,
        siglip_feats: Any = None,
        image_noise_mask: Any = None,
        patch_size: int = 2,
        f_patch_size: int = 1,
        joint_attention_kwargs: dict | None = None,
    ) -> Any:
        if siglip_feats is not None or image_noise_mask is not None:
            raise ValueError("the batched Z-Image forward has no omni mode")
        p, pf = patch_size, f_patch_size
        adaln = self.t_embedder(t * self.t_scale).type_as(x)
        image, image_freqs, cap, cap_freqs, tokens, grid = _embedded(self, x, cap_feats, p, pf)
        for layer in self.noise_refiner:
            image = layer(image, None, image_freqs, adaln)
        for layer in self.context_refiner:
            cap = layer(cap, None, cap_freqs)
        unified = torch.cat([image, cap], dim=1)
        freqs = torch.cat([image_freqs, cap_freqs], dim=1)
        for index, layer in enumerate(self.layers):
            unified = layer(unified, None, freqs, adaln)
            if controlnet_block_samples is not None and index in controlnet_block_samples:
                unified = unified + controlnet_block_samples[index]
        unified = self.all_final_layer[f"{p}-{pf}"](unified, c=adaln)
        b, c = x.shape[0], self.out_channels
        out = (
            unified[:, :tokens]
            .reshape(b, *grid, pf, p, p, c)
            .permute(0, 7, 1, 4, 2, 5, 3, 6)
            .reshape(b, c, grid[0] * pf, grid[1] * p, grid[2] * p)
        )
        return Transformer2DModelOutput(sample=out) if return_dict else (out,)

    module.forward = types.MethodType(forward, module)
    module.rope_embedder.freqs_pairs = _tables(module)
    module.takes_stacked_lists = True


def batched_controlnet(module: torch.nn.Module) -> None:
    # Its own modules and those it shares with the transformer (``from_transformer``): the
    # same steps over stacked samples; every row is as long as the others, so the all-ones
    # attention masks diffusers builds are dropped (a mask of ones masks nothing).
    def forward(
        self: Any,
        x: torch.Tensor,
        t: torch.Tensor,
        cap_feats: torch.Tensor,
        control_context: torch.Tensor,
        conditioning_scale: Any = 1.0,
        patch_size: int = 2,
        f_patch_size: int = 1,
    ) -> dict[int, torch.Tensor]:
        p, pf = patch_size, f_patch_size
        adaln = self.t_embedder(t * self.t_scale)
        image, image_freqs, cap, cap_freqs, _, _ = _embedded(self, x, cap_feats, p, pf)
        adaln = adaln.type_as(image)
        embed = self.control_all_x_embedder[f"{p}-{pf}"]
        control = _padded(embed(_patchify(control_context, p, pf)), self.x_pad_token)
        refiner_hints = {}
        if self.add_control_noise_refiner is not None:
            layers = (
                self.control_layers
                if self.add_control_noise_refiner == "control_layers"
                else self.control_noise_refiner
            )
            for layer in layers:
                control = layer(control, image, None, image_freqs, adaln)
            hints, control = control[:-1], control[-1]
            places = self.control_refiner_layers_places
            refiner_hints = {place: hints[i] * conditioning_scale for i, place in enumerate(places)}
        for index, layer in enumerate(self.noise_refiner):
            image = layer(image, None, image_freqs, adaln)
            if index in refiner_hints:
                image = image + refiner_hints[index]
        for layer in self.context_refiner:
            cap = layer(cap, None, cap_freqs)
        unified = torch.cat([image, cap], dim=1)
        freqs = torch.cat([image_freqs, cap_freqs], dim=1)
        if not self.add_control_noise_refiner:
            for layer in self.control_noise_refiner:
                control = layer(control, None, image_freqs, adaln)
        control = torch.cat([control, cap], dim=1)
        for layer in self.control_layers:
            control = layer(control, unified, None, freqs, adaln)
        hints = control[:-1]
        places = self.control_layers_places
        return {place: hints[i] * conditioning_scale for i, place in enumerate(places)}

    module.forward = types.MethodType(forward, module)
    module.takes_stacked_lists = True
    if module.rope_embedder is not None:  # shared with the transformer (from_transformer)
        module.rope_embedder.freqs_pairs = _tables(module)
