"""AutoencoderKLAllegro: tiling on, the model's only implemented computation.

Its ``_encode`` and ``_decode`` raise ``NotImplementedError`` unless ``use_tiling`` is set; the
computation diffusers implements, and Allegro's pipeline runs (``vae.enable_tiling()``), is
``tiled_encode`` / ``tiled_decode``: the video cut into kernels of (24 frames, ``sample_size``,
``sample_size``) at strides set by hard-coded overlaps (8 frames, 120 rows, 80 columns), each
tile encoded or decoded alone, the tiles blended by linear ramps over their overlaps. The tile
grid is a Python loop over ``floor((size - kernel) / stride) + 1`` tiles per axis, so each graph
is made for one grid (``mobius.diffusers.tiled_vae``). The PyTorch reference of the parity
sweep turns tiling on the same way (``mobius.verification.diffusers_feeds.AS_DESIGNED``).
"""

from __future__ import annotations

import torch


def tiling_on(module: torch.nn.Module) -> None:
    module.enable_tiling()
