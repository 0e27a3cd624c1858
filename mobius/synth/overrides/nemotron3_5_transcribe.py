"""Nemotron 3.5 Transcribe (``nemo_speechlm``): the audio tower and its diarization model on one
chunk, without the Python loops over chunks that fix the frame count."""

from __future__ import annotations

import sys
from typing import Any

import torch


def one_chunk(module: torch.nn.Module) -> None:
    # Nemotron3_5TranscribeAudioModel runs its ASR encoder once per chunk of chunk_length encoder
    # frames (with look-back and look-ahead context) in a Python loop over range(0, frames,
    # chunk_length), which fixes the frame count in the trace. A clip of at most chunk_length
    # encoder frames (340: 27.2 s) is one chunk whose context is the whole clip: the encoder runs
    # once on all of it. A longer clip would need the loop, so the graph refuses it at run time:
    # a zero gathered from a one-element table at 2 * (frames past the chunk) fails (ONNX
    # Gather's index check) instead of a silently different answer.
    family = sys.modules[type(module).__module__]

    def forward(input_features: torch.Tensor, input_features_mask: Any = None, **kwargs: Any):
        factor = module.config.subsampling_factor
        frames = input_features.shape[1] // factor
        if input_features_mask is None:
            input_features_mask = torch.ones(
                input_features.shape[:2], dtype=torch.long, device=input_features.device
            )
        asr_input = family.normalize_per_feature(input_features, input_features_mask)
        asr_input = asr_input.to(module.asr_encoder.dtype)
        hidden_states = module.asr_encoder(asr_input, input_features_mask).last_hidden_state
        length = input_features.new_ones((), dtype=torch.int64) * frames
        past = (length - module.config.diarization_config.chunk_length).clamp(min=0)
        hidden_states = hidden_states + hidden_states.new_zeros(1)[(2 * past).view(1)].sum()
        speaker_logits = module.diarization_model(
            input_features.to(module.diarization_model.dtype), attention_mask=input_features_mask
        ).logits
        probabilities = speaker_logits.sigmoid().unflatten(1, (frames, -1)).mean(2)
        probs = probabilities.to(hidden_states.dtype)
        activity = (probs > module.config.speaker_activity_threshold).to(hidden_states.dtype)
        speaker_states = module.speaker_embedding(module.speaker_norm(activity))
        return family.Nemotron3_5TranscribeAudioModelOutput(
            last_hidden_state=module.asr_norm(hidden_states) + speaker_states,
            asr_last_hidden_state=hidden_states,
            speaker_logits=speaker_logits,
        )

    module.forward = forward


def diarization_one_chunk(module: torch.nn.Module) -> None:
    # Nemotron3DiarizationForAudioFrameClassification's offline forward loops over chunks of
    # chunk_length encoder frames, each read after a speaker cache that the chunks before it
    # filled. On one chunk (the bound one_chunk states) the cache is empty: the chunk is the whole
    # clip, its logits are the classifier's on the encoder's output, and the cache's update after
    # it changes nothing returned.
    def forward(input_features: torch.Tensor, attention_mask: Any = None, **kwargs: Any):
        from transformers.modeling_outputs import TokenClassifierOutput

        factor = module.config.audio_config.subsampling_factor
        frames = input_features.shape[1]
        inputs_embeds = module.model.audio_tower.embedder(input_features)
        mask = None if attention_mask is None else attention_mask[:, ::factor].bool()
        positions = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)[None, :]
        out = module.model(inputs_embeds=inputs_embeds, attention_mask=mask, position_ids=positions)
        logits = module.classifier(out.last_hidden_state)
        return TokenClassifierOutput(
            logits=logits[:, : inputs_embeds.shape[1] * factor][:, :frames]
        )

    module.forward = forward
