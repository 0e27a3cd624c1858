"""EasyAnimate: the rotary grid's crop computed from the latents' sizes in the graph."""

from __future__ import annotations

import types

import torch
from diffusers.models.embeddings import get_1d_rotary_pos_embed


def crop_from_sizes(module: torch.nn.Module) -> None:
    # EasyAnimateRotaryPosEmbed fits the patch grid into a 60x90-pixel base grid, cropping it
    # centred: a branch on the aspect ratio, `int(round(...))` of the resized side and of the
    # crop's offsets, all Python arithmetic on the sizes, then `linspace` over the crop. Traced,
    # the arithmetic follows the sizes only where torch.export keeps it symbolic, and a grid of
    # one patch a side (linspace of one step) leaves a guard. The same arithmetic on float64
    # tensors of the sizes (IEEE division, `torch.round` rounds half to even as Python's `round`
    # does) and linspace's own formula give the same positions at every size.
    def forward(self: torch.nn.Module, hidden_states: torch.Tensor) -> tuple:
        _, _, frames, height, width = hidden_states.shape
        rows, cols = height // self.patch_size, width // self.patch_size
        base_h, base_w = 60 // self.patch_size, 90 // self.patch_size
        device = hidden_states.device
        # tensors on both sides of each division: `30 / h` would be `h.reciprocal() * 30`
        h, w = _size(rows, device), _size(cols, device)
        base_h, base_w = _size(base_h, device), _size(base_w, device)
        taller = h / w > base_h / base_w
        resized_h = torch.where(taller, base_h, torch.round(base_w / w * h))
        resized_w = torch.where(taller, torch.round(base_h / h * w), base_w)
        top = torch.round((base_h - resized_h) / 2.0)
        left = torch.round((base_w - resized_w) / 2.0)
        grid_h = _linspace(top, (top + resized_h) * (h - 1) / h, rows)
        grid_w = _linspace(left, (left + resized_w) * (w - 1) / w, cols)
        grid_t = torch.arange(frames, device=device, dtype=torch.float32)  # linspace(0, t - 1, t)
        dim = self.rope_dim
        tables = [get_1d_rotary_pos_embed(d, g, use_real=True) for d, g in
                  ((dim // 4, grid_t), (dim // 8 * 3, grid_h), (dim // 8 * 3, grid_w))]  # fmt: skip
        return tuple(_combine([t[i] for t in tables], frames, rows, cols) for i in (0, 1))

    module.forward = types.MethodType(forward, module)


def _size(n: int | torch.SymInt, device: torch.device) -> torch.Tensor:
    """A size as a float64 scalar tensor."""
    return torch.full((), n, dtype=torch.float64, device=device)


def _linspace(start: torch.Tensor, end: torch.Tensor, steps: int | torch.SymInt) -> torch.Tensor:
    """``torch.linspace(start, end, steps)`` in float32 for scalar tensors, by its CPU formula:
    the first ``steps // 2`` counted up from ``start``, the rest down from ``end``."""
    start, end = start.float(), end.float()
    idx = torch.arange(steps, device=start.device)
    step = (end - start) / torch.clamp(_size(steps, start.device) - 1, min=1).float()
    up = start + step * idx.float()
    down = end - step * (steps - 1 - idx).float()
    return torch.where((2 * idx + 2 <= steps) | (idx == 0), up, down)  # one step: start


def _combine(freqs: list[torch.Tensor], frames, rows, cols) -> torch.Tensor:
    """Each token's (frame, row, column) frequencies side by side, tokens frame-major."""
    t, h, w = freqs
    t = t[:, None, None, :].expand(-1, rows, cols, -1)
    h = h[None, :, None, :].expand(frames, -1, cols, -1)
    w = w[None, None, :, :].expand(frames, rows, -1, -1)
    return torch.cat([t, h, w], dim=-1).reshape(frames * rows * cols, -1)
