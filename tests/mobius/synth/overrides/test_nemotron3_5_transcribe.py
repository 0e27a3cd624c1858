"""Nemotron 3.5 Transcribe's overrides (mobius/synth/overrides/nemotron3_5_transcribe.py): the
audio tower and its diarization model on one chunk give HF's chunk loop exactly for clips that
fit a chunk, padded or not, eagerly; the traced graphs are checked by
benchmarks/speech_coverage.py."""

from __future__ import annotations

import copy

import pytest
import torch

from mobius.synth.shims import make_traceable
from mobius.tasks.audio_llm import audio_features
from mobius.testing.audio_llm import tiny_audio_llm


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory):
    model, _ = tiny_audio_llm("nemo_speechlm", tmp_path_factory.mktemp("nemotron"))
    ours = make_traceable(copy.deepcopy(model))
    tower = ours.model.audio_tower
    assert "forward" in vars(tower) and "forward" in vars(tower.diarization_model)  # installed
    return model, ours


@pytest.mark.parametrize("frames", [80, 400])
def test_features_equal_hf_on_one_chunk(nemotron, frames):
    model, ours = nemotron
    gen = torch.Generator().manual_seed(frames)
    clips = {
        "input_features": torch.randn(2, frames, 128, generator=gen),
        "input_features_mask": torch.ones(2, frames, dtype=torch.int64),
    }
    clips["input_features_mask"][1, frames // 2 :] = 0
    clips["input_features"][1, frames // 2 :] = 0
    with torch.no_grad():
        expected = audio_features(model, clips)
        got = audio_features(ours, clips)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
