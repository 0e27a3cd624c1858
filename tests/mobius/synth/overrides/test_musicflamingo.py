"""MusicFlamingo's override (mobius/synth/overrides/musicflamingo.py): each clip's rotary time
stamps equal HF's ``_build_audio_timestamps`` for prompts holding one or several clips, eagerly;
the traced graphs are checked by benchmarks/speech_coverage.py."""

from __future__ import annotations

import copy

import pytest
import torch

from mobius.synth.overrides.musicflamingo import window_index_by_comparison
from mobius.testing.audio_llm import tiny_audio_llm


def _prompts(token: int, runs_per_row: list[list[int]]) -> torch.Tensor:
    """Left-padded prompts, each holding runs of ``token`` of the given lengths between text."""
    rows = []
    for runs in runs_per_row:
        row = [5, 6]
        for count in runs:
            row += [token] * count + [7]
        rows.append(row)
    width = max(len(r) for r in rows)
    return torch.tensor([[0] * (width - len(r)) + r for r in rows])


@pytest.fixture(scope="module")
def musicflamingo(tmp_path_factory):
    model, config = tiny_audio_llm("musicflamingo", tmp_path_factory.mktemp("musicflamingo"))
    ours = copy.copy(model.model)
    window_index_by_comparison(ours)
    return model.model, ours, config


@pytest.mark.parametrize(
    ("clips", "runs"),
    [
        ([16, 10], [[16], [10]]),  # one clip per prompt
        ([16, 16, 10], [[32], [10]]),  # a prompt whose audio spans two windows
        ([16, 16, 16, 4], [[16, 16], [20]]),  # two runs in one prompt, a run of two windows
        ([7], [[7]]),
    ],
)
def test_time_stamps_equal_hf(musicflamingo, clips, runs):
    model, ours, config = musicflamingo
    ids, lengths = _prompts(config.audio_token_id, runs), torch.tensor(clips)
    expected = model._build_audio_timestamps(ids, lengths, 16)
    got = ours._build_audio_timestamps(ids, lengths, 16)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)
