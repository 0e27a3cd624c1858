"""CogVideoX's VAE: the frame count fixed in the trace, so that the graph is made for one count.

``AutoencoderKLCogVideoX._encode``/``_decode`` cut the frames into chunks (8 frames in, 2
latent frames out) in a Python loop of ``num_frames // chunk`` steps, and each chunk is not the
same computation as the whole: its group norms take statistics over the chunk's frames and its
temporal up-sampling keeps the chunk's odd first frame as it is. Traced with a symbolic frame
count the loop is unrolled for the traced count while the input stays symbolic, and torch.export
records no check that catches it: at 9 latent frames the decoder gave 9 frames, not 17. Reading
the count as a Python int fixes it in the trace, which the trace refuses as frame-dependent and
retraces at one frame count (``components.prepare_graph``); batch, height and width stay dynamic.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def frames_fixed_per_graph(module: torch.nn.Module) -> None:
    encode, decode = module._encode, module._decode

    def _encode(self: Any, x: torch.Tensor) -> torch.Tensor:
        int(x.shape[2])  # the chunk loop is unrolled for this count: make it a constant
        return encode(x)

    def _decode(self: Any, z: torch.Tensor, return_dict: bool = True) -> Any:
        int(z.shape[2])
        return decode(z, return_dict=return_dict)

    module._encode = types.MethodType(_encode, module)
    module._decode = types.MethodType(_decode, module)
