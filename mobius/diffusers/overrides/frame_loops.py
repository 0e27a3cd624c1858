"""Causal video VAEs that loop over frames in Python where the trace records no guard on the
frame count: the count fixed in the trace, so that each graph is made for one count.

Wan's and QwenImage's VAEs encode the first frame, then chunks of 4, in a loop of
``1 + (num_frames - 1) // 4`` steps, and decode frame by frame, with a cache of each causal
convolution's last frames. The chunks are not the computation of the whole: group norms take
statistics over a chunk's frames, and temporal up- and down-sampling treat a chunk's first frame
apart. Traced with a symbolic frame count the loop is unrolled for the traced count while the
input stays symbolic, and torch.export records no check that catches it: at 9 frames Wan's
encoder gave 3 latent frames, not 3 + 2. Reading the count as a Python int fixes it in the
trace, which the trace then refuses as frame-dependent and retraces at one frame count
(``components.prepare_graph``); batch, height and width stay dynamic. CogVideoX's VAE, whose
loop leaves a guard on the frame count, needs no override: ``trace.unaccepted_bounds`` refuses
that guard and the same retrace follows. Making them frame-dynamic means rewriting each loop as
one causal pass (not done).
"""

from __future__ import annotations

import types
from typing import Any

import torch


def frames_fixed_per_graph(module: torch.nn.Module) -> None:
    encode, decode = module._encode, module._decode

    def _encode(self: Any, x: torch.Tensor) -> torch.Tensor:
        int(x.shape[2])  # the loop is unrolled for this count: make it a constant of the trace
        return encode(x)

    def _decode(self: Any, z: torch.Tensor, return_dict: bool = True) -> Any:
        int(z.shape[2])
        return decode(z, return_dict=return_dict)

    module._encode = types.MethodType(_encode, module)
    module._decode = types.MethodType(_decode, module)
