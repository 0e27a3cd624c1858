"""Wan Animate's transformer (``overrides/wan_animate.py``, its argument rules, ``lowering/qr.py``):
the face frames encoded in one pass, the motion basis (QR of a parameter) stored as an initializer
with torch's signs, the pose and face frame axes following the video's (every axis dynamic).
Converted with the CLI; matches PyTorch at atol 1e-4 at the sweep's two size sets."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

KEY = "motion_encoder.motion_synthesis_weight"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert("WanAnimateTransformer3DModel", tmp_path_factory.mktemp("wan_animate"))


def test_matches_pytorch_at_both_size_sets(converted):
    model, out = converted
    diffs = max_diffs(model, out)
    assert len(diffs) == 2  # out_sample at two size sets
    assert max(diffs.values()) < ATOL, diffs


def test_every_axis_dynamic_but_the_face_size(converted):
    """The pose and face frames follow the video's (one fewer, and 4 (T - 1) + 1 for T pose
    frames: fed so at 9 and 13 video frames by max_diffs); the face video at the motion
    encoder's 16 pixels."""
    _, out = converted
    session = ort.InferenceSession(str(out / "model.onnx"))
    shapes = {i.name: i.shape for i in session.get_inputs()}
    assert shapes == {
        "hidden_states": ["batch", 12, "num_frames", "height", "width"],
        "timestep": ["batch"],
        "encoder_hidden_states": ["batch", "sequence_length", 12],
        "encoder_hidden_states_image": ["batch", "image_sequence_length", 10],
        "pose_hidden_states": ["batch", 4, "pose_frames", "height", "width"],
        "face_pixel_values": ["batch", 3, "face_frames", 16, 16],
    }


def test_the_motion_basis_is_the_parameters_q_with_torchs_signs(converted):
    """The graph holds Q of ``weight + 1e-8`` (computed by numpy when written), not the
    parameter; it equals torch's Q, column signs included."""
    model, out = converted
    proto = onnx.load(str(out / "model.onnx"))
    stored = {i.name: i for i in proto.graph.initializer}
    assert KEY not in stored
    q = onnx.numpy_helper.to_array(stored[f"{KEY}.Q"])
    expected = torch.linalg.qr(model.motion_encoder.motion_synthesis_weight.detach() + 1e-8)[0]
    assert q.shape == tuple(expected.shape)
    np.testing.assert_allclose(q, expected.numpy(), atol=1e-6)


def test_chunks_of_face_frames_only_bound_memory(converted):
    """PyTorch's forward in chunks of 2 face frames gives what one pass of all 26 gives."""
    model, _ = converted
    gen = torch.Generator().manual_seed(5)
    inputs = {
        "hidden_states": torch.randn(2, 12, 5, 4, 6, generator=gen),
        "timestep": torch.rand(2, generator=gen) * 900,
        "encoder_hidden_states": torch.randn(2, 3, 12, generator=gen),
        "encoder_hidden_states_image": torch.randn(2, 2, 10, generator=gen),
        "pose_hidden_states": torch.randn(2, 4, 4, 4, 6, generator=gen),
        "face_pixel_values": torch.randn(2, 3, 13, 16, 16, generator=gen),
    }
    with torch.no_grad():
        chunked = model(**inputs, motion_encode_batch_size=2, return_dict=False)[0]
        whole = model(**inputs, motion_encode_batch_size=26, return_dict=False)[0]
    torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=0)


def test_pose_and_face_frames_follow_the_video_frames():
    """The feeds' sizes (``tasks.related_sizes``), and a frame count fixed with the video's."""
    from mobius.diffusers.tasks import (
        EXAMPLE_SIZES,
        FACE_FRAMES,
        FRAMES,
        POSE_FRAMES,
        DiffusersTask,
        fixed_axes,
        related_sizes,
    )
    from mobius.tasks.base import TensorSpec

    sizes = related_sizes({}, EXAMPLE_SIZES | {FRAMES: 21})  # the pipeline's 77-frame segment
    assert (sizes[POSE_FRAMES], sizes[FACE_FRAMES]) == (20, 77)
    specs = [TensorSpec(f"x{i}", None, (1, d)) for i, d in enumerate((FRAMES, POSE_FRAMES,
                                                                      FACE_FRAMES))]  # fmt: skip
    task = fixed_axes(DiffusersTask("t", lambda cfg: specs, None, ("y",)), None, {FRAMES: 5})
    assert [s.dims[1] for s in task._inputs(None)] == [5, 4, 13]
