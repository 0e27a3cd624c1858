"""Qwen2-Audio's audio features: its model has no ``get_audio_features``; its forward computes
them inline (tower on a bidirectional mask of the real frames, projector, then each clip's first
``audio_output_lengths`` rows), which this function does with the model's own modules, so the
audio graph has a features method as the other speech LLMs do."""

from __future__ import annotations

from typing import Any

import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling


def qwen2_audio_features(
    self: Any, input_features: torch.Tensor, feature_attention_mask: torch.Tensor, **kwargs: Any
) -> BaseModelOutputWithPooling:
    """HF's ``Qwen2AudioForConditionalGeneration.forward`` audio branch: ``pooler_output`` holds
    every clip's real rows, in batch order."""
    from transformers.masking_utils import create_bidirectional_mask

    inner = self.model if hasattr(self, "model") and hasattr(self.model, "audio_tower") else self
    tower = inner.audio_tower
    feat_lengths, output_lengths = tower._get_feat_extract_output_lengths(
        feature_attention_mask.sum(-1)
    )
    batch, _, mel_frames = input_features.shape
    frames = (mel_frames - 2) // 2 + 1
    seq = torch.arange(frames, dtype=feat_lengths.dtype, device=feat_lengths.device)
    real = (seq[None, :] < feat_lengths[:, None]).to(torch.long)
    dummy = torch.zeros(
        (batch, frames, 1), dtype=input_features.dtype, device=input_features.device
    )
    mask = create_bidirectional_mask(config=tower.config, inputs_embeds=dummy, attention_mask=real)
    hidden = tower(input_features, attention_mask=mask).last_hidden_state
    features = inner.multi_modal_projector(hidden)
    keep = (
        torch.arange(features.shape[1], device=features.device)[None, :] < output_lengths[:, None]
    )
    return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=features[keep])


def _own_features() -> dict[str, Any]:
    from mobius.tasks.phi4_multimodal import phi4_audio_features

    return {
        "Qwen2AudioForConditionalGeneration": qwen2_audio_features,
        "Phi4MultimodalForCausalLM": phi4_audio_features,
    }


# class name -> the audio features method of a model that has none of its own
OWN_FEATURES = _own_features()
