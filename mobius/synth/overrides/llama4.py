"""Llama 4: the image features its forward places, and its forward's return in this transformers."""

from __future__ import annotations

from typing import Any

import torch


def projected_features(module: torch.nn.Module) -> None:
    # Llama4ForConditionalGeneration.get_image_features returns the vision model's states; the
    # forward flattens last_hidden_state and projects it with multi_modal_projector before placing
    # it at the image tokens. The split's vision graph is get_image_features, so its pooler output
    # is made the projected rows: the features the forward places (its last_hidden_state, which
    # the forward reads, is left as it is).
    original = module.get_image_features

    def get_image_features(pixel_values: torch.Tensor, **kwargs: Any):
        out = original(pixel_values, **kwargs)
        states = out.last_hidden_state
        out.pooler_output = module.multi_modal_projector(states.reshape(-1, states.shape[-1]))
        return out

    module.get_image_features = get_image_features
    _output_without_image_outputs(module)


def _output_without_image_outputs(module: torch.nn.Module) -> None:
    # In transformers 5.24 the forward ends by reading `image_outputs` from its language model's
    # MoeCausalLMOutputWithPast, which has no such field: every call raises (text only too). The
    # language model's output gets the field, empty; logits and cache are untouched.
    language_model = module.language_model
    original = language_model.forward

    def forward(*args: Any, **kwargs: Any):
        out = original(*args, **kwargs)
        if not hasattr(out, "image_outputs"):
            out.image_outputs = None
        return out

    language_model.forward = forward


def rotary_made_in_graph(module: torch.nn.Module) -> None:
    # Llama4VisionRotaryEmbedding holds its rotary as a complex64 buffer (freqs_ci): a complex
    # constant, which ONNX cannot hold (complex values are carried as real pairs only where the
    # graph makes them). HF's own recipe (_compute_freqs_ci: positions, cos and sin, then
    # view_as_complex) is traced instead, so the complex tensor is made in the graph from reals.
    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        with torch.device(hidden_states.device):
            return type(module)._compute_freqs_ci(module.config)

    module.forward = forward
