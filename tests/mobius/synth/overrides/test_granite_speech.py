"""Granite Speech's overrides (mobius/synth/overrides/granite_speech.py): the Conformer's block
attention and the Q-Former's windows give HF's features for frame counts below, at and past a
block, eagerly; the traced graphs are checked by benchmarks/speech_coverage.py."""

from __future__ import annotations

import copy

import pytest
import torch

from mobius.synth.shims import make_traceable
from mobius.testing.audio_llm import tiny_audio_llm


@pytest.fixture(scope="module")
def granite(tmp_path_factory):
    model, config = tiny_audio_llm("granite_speech", tmp_path_factory.mktemp("granite"))
    return model, make_traceable(copy.deepcopy(model)), config


@pytest.mark.parametrize("frames", [37, 199, 200, 201, 455])
def test_features_equal_hf_at_every_frame_count(granite, frames):
    model, ours, config = granite
    gen = torch.Generator().manual_seed(frames)
    features = torch.randn(2, frames, config.encoder_config.input_dim, generator=gen)
    with torch.no_grad():
        expected = model.model.get_audio_features(features).pooler_output
        got = ours.model.get_audio_features(features).pooler_output
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
