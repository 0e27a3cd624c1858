"""MusicFlamingo: the rotary time embedding's window index per clip without data-dependent
shapes."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def window_index_by_comparison(module: torch.nn.Module) -> None:
    # MusicFlamingoModel._build_audio_timestamps finds each prompt's runs of audio tokens with
    # torch.where (a data-dependent count), then maps each clip (30 s window) to its run and its
    # rank within the run with searchsorted; on those sizes the trace fixes the clip count. Here
    # a run is where an audio token is followed by a non-audio token (or the row's end), a clip's
    # run is the number of runs that end at or before the audio tokens of the clips ahead of it,
    # and its rank is the number of clips ahead of it in the same run: comparison matrices whose
    # sizes are the clip and prompt-token counts, the same indices for every count.
    def build(
        input_ids: torch.Tensor, post_lengths: torch.Tensor, max_post_length: int
    ) -> torch.Tensor:
        audio = (input_ids == module.config.audio_token_id).long()
        following = F.pad(audio[:, 1:], (0, 1), value=0)
        run_end = (audio * (1 - following)).flatten()
        ordinal = audio.flatten().cumsum(0)  # each audio token's rank among them, from 1
        tokens_ahead = post_lengths.cumsum(0) - post_lengths  # audio tokens of the earlier clips
        run = ((ordinal[None, :] <= tokens_ahead[:, None]).long() * run_end[None, :]).sum(-1)
        clips = torch.arange(post_lengths.shape[0], device=post_lengths.device)
        earlier = clips[None, :] < clips[:, None]
        window = (earlier & (run[None, :] == run[:, None])).long().sum(-1)
        step = module.config.audio_frame_step * 4  # conv2 and the average pooling: 4x fewer rows
        offsets = torch.arange(max_post_length, device=post_lengths.device, dtype=torch.float32)
        return window.unsqueeze(1) * max_post_length * step + offsets * step

    module._build_audio_timestamps = build
