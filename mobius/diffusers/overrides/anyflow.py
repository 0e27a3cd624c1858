"""AnyFlow: the rotary table's empty-grid check made per axis.

``AnyFlowRotaryPosEmbed._forward_full_frame`` returns an empty table when ``min(frames, rows,
cols) <= 0``. Python's ``min`` of traced sizes picks one axis at trace (the frames, at 5 frames of
12 x 20 patches) and records ``rows >= frames`` and ``cols >= frames``; the graph then refused
(or, unchecked, held only for) grids with more frames than patch rows or columns, such as 9
frames of 8 x 4 patches. No size is ever 0 or less, so which axis is smallest changes nothing:
the same check on each axis alone (``size <= 0``) records no relation, and the table is the
model's for every grid.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch


def grid_table(
    self: torch.nn.Module,
    num_frames: int,
    height: int,
    width: int,
    device: torch.device,
    pool: Callable[[list[torch.Tensor]], list[torch.Tensor]] = lambda tables: tables,
) -> torch.Tensor:
    """The rotary table of a ``num_frames x height x width`` grid from the module's per-axis
    tables (``pool``ed first: AnyFlow FAR's compressed frames), empty where an axis is 0; the
    empty check made on each axis alone."""
    freqs_full = self._build_freqs(device)
    if num_frames <= 0 or height <= 0 or width <= 0:
        channels = self.attention_head_dim // 2
        return torch.empty((num_frames, height, width, channels), dtype=freqs_full.dtype,
                           device=device)  # fmt: skip
    third = self.attention_head_dim // 6
    freqs = pool(
        list(
            freqs_full.split_with_sizes(
                [self.attention_head_dim // 2 - 2 * third, third, third], dim=1
            )
        )  # fmt: skip
    )
    grid = (num_frames, height, width, -1)
    freqs_f = freqs[0][:num_frames].view(num_frames, 1, 1, -1).expand(*grid)
    freqs_h = freqs[1][:height].view(1, height, 1, -1).expand(*grid)
    freqs_w = freqs[2][:width].view(1, 1, width, -1).expand(*grid)
    return torch.cat([freqs_f, freqs_h, freqs_w], dim=-1)


def full_frame_check_per_axis(module: torch.nn.Module) -> None:
    module._forward_full_frame = types.MethodType(grid_table, module)
