"""Wan Animate: the face video's frames encoded in one pass, not in chunks, and their count
stated as its pipeline relates it to the pose frames.

WanAnimateTransformer3DModel splits the face frames (``batch * frames`` images) into chunks of
``motion_encode_batch_size`` in Python and runs its motion encoder on each: a loop whose length
follows the batch, which a trace with a dynamic batch cannot unroll. Every step of the encoder
(2-D convolutions, leaky ReLUs, linears and the product with its orthogonalised basis) computes
each image alone, so the chunks only bound memory: one chunk of all the frames computes the same
values. The basis itself, ``torch.linalg.qr`` of a parameter, is a constant of the checkpoint
(``lowering/qr.py``).

Three frame axes are related: the video's latents have T + 1 frames (the reference image's
first), the pose latents T (the forward checks it: the trace derives one from the other), and
the face video 4 (T - 1) + 1, whose two stride-2 convolutions must give the T motion frames (T + 1
with the padding frame) by which the face adapter splits the video's tokens. Left independent,
the face frame count reaches the token split through floor divisions that torch.export cannot
relate to the video's; its pipeline always passes 4 (T - 1) + 1 (77 for T = 20), and stated so
(``torch._check``) the trace derives it from T and every frame axis stays dynamic.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def face_frames_in_one_pass(module: torch.nn.Module) -> None:
    forward = module.forward

    def one_pass(
        self: Any,
        *args: Any,
        face_pixel_values: torch.Tensor | None = None,
        motion_encode_batch_size: int | None = None,
        **kwargs: Any,
    ) -> Any:
        if face_pixel_values is not None:  # [batch, channels, frames, height, width]
            motion_encode_batch_size = face_pixel_values.shape[0] * face_pixel_values.shape[2]
            pose = kwargs.get("pose_hidden_states")
            if pose is not None:
                torch._check(face_pixel_values.shape[2] == 4 * (pose.shape[2] - 1) + 1)
        return forward(
            *args,
            face_pixel_values=face_pixel_values,
            motion_encode_batch_size=motion_encode_batch_size,
            **kwargs,
        )

    module.forward = types.MethodType(one_pass, module)
