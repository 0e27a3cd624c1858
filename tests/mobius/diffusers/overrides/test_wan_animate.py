"""Wan Animate's transformer (``overrides/wan_animate.py``, its argument rules, ``lowering/qr.py``):
the face frames encoded in one pass, the motion basis (QR of a parameter) stored as an initializer
with torch's signs, the frame axes fixed per graph. Converted with the CLI; matches PyTorch at
atol 1e-4 at the sweep's two size sets."""

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


def test_frames_fixed_batch_and_resolution_dynamic(converted):
    """5 latent frames (the reference's and 4 more), 4 pose latent frames, 13 face frames at
    the motion encoder's 16 pixels; batch, height, width and the token counts dynamic."""
    _, out = converted
    session = ort.InferenceSession(str(out / "model.onnx"))
    shapes = {i.name: i.shape for i in session.get_inputs()}
    assert shapes == {
        "hidden_states": ["batch", 12, 5, "height", "width"],
        "timestep": ["batch"],
        "encoder_hidden_states": ["batch", "sequence_length", 12],
        "encoder_hidden_states_image": ["batch", "image_sequence_length", 10],
        "pose_hidden_states": ["batch", 4, 4, "height", "width"],
        "face_pixel_values": ["batch", 3, 13, 16, 16],
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
