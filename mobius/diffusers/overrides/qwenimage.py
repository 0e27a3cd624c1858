"""QwenImage and NucleusMoE: the rotary tables cut by rows gathered at positions computed from
the (symbolic) grid and prompt length, not by ``int()`` and slices of complex constants.

``QwenEmbedRope`` and ``NucleusMoEEmbedRope`` hold complex64 tables of 4096 positions per axis
(``pos_freqs``, and ``neg_freqs`` for the negative positions of a centred grid) and cut them by
Python ints: the frame, height and width of ``img_shapes`` (symbolic sizes here: the latent
grid, ``mobius.diffusers.latent_grid``) and ``int(max_txt_seq_len)``, which fixes the prompt
length in a trace. A complex constant is no ONNX initializer either. Here both tables are one
float32 table of (real, imaginary) pairs, row ``p + 4096`` holding position ``p`` in
[-4096, 4096), and every row the model would slice is gathered by its position: the frame
index, the height and width positions (centred under ``scale_rope``: ``-(n - n // 2)`` to
``n // 2 - 1``), and the text positions from ``max(height, width)`` (halved under
``scale_rope``) on. The values are the model's rows, so the result is equal to the last bit.
"""

from __future__ import annotations

import types
from typing import Any

import torch

ROWS = 4096  # positions per sign in the models' tables


def _axis(table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return table.to(positions.device).index_select(0, positions + ROWS)


def _positions(n: Any, centred: bool, device: torch.device | None) -> torch.Tensor:
    """The positions of ``n`` rows or columns: ``0 .. n - 1``, or centred on 0."""
    index = torch.arange(n, device=device)
    return index - (n - n // 2) if centred else index


def rotary_by_gathers(module: torch.nn.Module, running_max: bool = True) -> None:
    """Install the gathered tables; ``running_max``: the text starts past the largest grid of
    ``img_shapes`` (QwenImage), else past the last one's (NucleusMoE)."""
    pairs = torch.cat([torch.view_as_real(module.neg_freqs), torch.view_as_real(module.pos_freqs)])
    if pairs.shape[0] != 2 * ROWS:
        return  # another table than the one this override reads: leave the model's own
    halves = [d // 2 for d in module.axes_dim]
    tables = pairs.split(halves, dim=1)  # per axis: [2 * ROWS, d / 2, 2]

    def forward(
        self: Any, video_fhw: Any, device: torch.device | None = None, max_txt_seq_len: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if max_txt_seq_len is None:
            raise ValueError("`max_txt_seq_len` must be provided.")
        fhw = video_fhw[0] if isinstance(video_fhw, list) else video_fhw
        shapes = fhw if isinstance(fhw, list) else [fhw]
        video, longest = [], 0
        for index, (frame, height, width) in enumerate(shapes):
            axes = (
                _axis(tables[0], torch.arange(frame, device=device) + index),
                _axis(tables[1], _positions(height, self.scale_rope, device)),
                _axis(tables[2], _positions(width, self.scale_rope, device)),
            )
            grid = [
                a.view(*(n if i == axis else 1 for i, n in enumerate((frame, height, width))),
                       *a.shape[1:]).expand(frame, height, width, *a.shape[1:])
                for axis, a in enumerate(axes)
            ]  # fmt: skip
            video.append(torch.cat(grid, dim=3).reshape(frame * height * width, -1, 2))
            sizes = (height // 2, width // 2) if self.scale_rope else (height, width)
            longest = torch.sym_max(longest if running_max else 0, torch.sym_max(*sizes))
        text = torch.arange(max_txt_seq_len, device=device) + longest
        text_pairs = pairs.to(device).index_select(0, text + ROWS)
        return (
            torch.view_as_complex(torch.cat(video).contiguous()),
            torch.view_as_complex(text_pairs.contiguous()),
        )

    module.forward = types.MethodType(forward, module)


def nucleus_rotary_by_gathers(module: torch.nn.Module) -> None:
    rotary_by_gathers(module, running_max=False)


def _text_length(
    encoder_hidden_states: torch.Tensor, mask: torch.Tensor | None
) -> tuple[Any, None, torch.Tensor | None]:
    """``compute_text_seq_len_from_mask`` less the per-row lengths its callers drop (their
    fallback, ``torch.as_tensor`` of the prompt length, is a constant that fixes the length)."""
    return encoder_hidden_states.shape[1], None, None if mask is None else mask.to(torch.bool)


def text_length_from_shape(module: torch.nn.Module) -> None:
    # The transformers and the ControlNet call their module's compute_text_seq_len_from_mask
    # (NucleusMoE: _compute_...) and keep its first and last results only; the forward runs with
    # that name bound to _text_length, which gives those two alike.
    import sys

    namespace = sys.modules[type(module).__module__]
    names = [n for n in ("compute_text_seq_len_from_mask", "_compute_text_seq_len_from_mask")
             if hasattr(namespace, n)]  # fmt: skip
    forward = module.forward

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        originals = {n: getattr(namespace, n) for n in names}
        for name in names:
            setattr(namespace, name, _text_length)
        try:
            return forward(*args, **kwargs)
        finally:
            for name, original in originals.items():
                setattr(namespace, name, original)

    module.forward = types.MethodType(wrapped, module)
