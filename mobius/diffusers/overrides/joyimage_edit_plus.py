"""JoyImage Edit Plus: each patch's rotary position computed from ``shape_list`` as a tensor,
for every row at once, instead of a Python loop over the batch and its components.

``JoyImageEditPlusTransformer3DModel.forward`` takes ``shape_list``, one list of (t, h, w) grids
per batch row (the target, then each reference image, their patches packed one after the other
and padded to the longest row), and loops over rows and grids in Python to build each row's
rotary table (``arange`` over each grid, frames offset by the grids before it, cos 1 and sin 0
on padding) and its image mask: the loop fixes the batch and every grid. Here ``shape_list`` is
an int64 tensor ``[batch, components, 3]`` (a row with fewer grids padded by (0, 0, 0), which
holds no patch), and each patch finds its grid by the cumulative patch counts: its (frame, row,
column) is ``local // (h w) + frames before``, ``local // w mod h``, ``local mod w``, as
``meshgrid(..., indexing="ij")`` orders them. A padding patch gets position (0, 0, 0), whose
rotation is cos 1, sin 0: diffusers' padding values.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def _patch_positions(shape_list: torch.Tensor, patches: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each patch's (frame, row, column), ``[B, patches, 3]`` float32, and whether it is an
    image patch, ``[B, patches]``."""
    sizes = shape_list.prod(-1)  # [B, K]
    ends = sizes.cumsum(-1)
    starts = ends - sizes
    frames_before = shape_list[..., 0].cumsum(-1) - shape_list[..., 0]
    index = torch.arange(patches, device=shape_list.device)[None, :, None]  # [1, N, 1]
    inside = (index >= starts[:, None, :]) & (index < ends[:, None, :])  # [B, N, K]
    inside = inside.to(shape_list.dtype)

    def of_grid(values: torch.Tensor) -> torch.Tensor:  # the value of each patch's grid
        return (values[:, None, :] * inside).sum(-1)

    local = of_grid(starts.neg()) + index[..., 0] * inside.sum(-1)
    h = of_grid(shape_list[..., 1]).clamp(min=1)
    w = of_grid(shape_list[..., 2]).clamp(min=1)
    positions = torch.stack(
        [local // (h * w) + of_grid(frames_before), (local // w) % h, local % w], dim=-1
    )
    return positions.float(), index[..., 0] < ends[:, -1:]


def _rotary(theta: float, dims: list[int], positions: torch.Tensor) -> tuple:
    """Per-axis rotary tables of ``positions`` ``[B, N, 3]``, each value repeated twice,
    concatenated over the axes (``_get_rotary_pos_embed_for_range``)."""
    cos, sin = [], []
    for i, dim in enumerate(dims):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32)[: dim // 2] / dim))
        angles = positions[..., i : i + 1] * freqs.to(positions.device)
        cos.append(angles.cos().repeat_interleave(2, dim=-1))
        sin.append(angles.sin().repeat_interleave(2, dim=-1))
    return torch.cat(cos, dim=-1), torch.cat(sin, dim=-1)


def rotary_from_shape_tensor(module: torch.nn.Module) -> None:
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_hidden_states_mask: torch.Tensor | None = None,
        shape_list: torch.Tensor | None = None,
        return_dict: bool = True,
    ) -> Any:
        batch, patches, channels, pt, ph, pw = hidden_states.shape
        _, vec, txt = self.condition_embedder(timestep, encoder_hidden_states)
        vec = vec.unflatten(1, (6, -1))
        img = self.img_in(hidden_states.reshape(batch * patches, channels, pt, ph, pw))
        img = img.reshape(batch, patches, -1)
        positions, is_image = _patch_positions(shape_list, patches)
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        dims = self.config.rope_dim_list or [head_dim // 3] * 3
        freqs = _rotary(self.config.theta, dims, positions)
        mask = None
        if encoder_hidden_states_mask is not None:
            image_mask = is_image.to(encoder_hidden_states_mask.dtype)
            mask = torch.cat([image_mask, encoder_hidden_states_mask], dim=1)[:, None, None].bool()
        for block in self.double_blocks:
            img, txt = block(hidden_states=img, encoder_hidden_states=txt, temb=vec,
                             image_rotary_emb=freqs, attention_mask=mask)  # fmt: skip
        img = self.proj_out(self.norm_out(img))
        img = img.reshape(batch, patches, pt, ph, pw, self.out_channels).permute(0, 1, 5, 2, 3, 4)
        return Transformer2DModelOutput(sample=img) if return_dict else (img,)

    module.forward = types.MethodType(forward, module)
    module.takes_stacked_lists = True
