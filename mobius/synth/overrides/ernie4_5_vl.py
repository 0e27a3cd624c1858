"""Ernie 4.5 VL MoE: the resampler's frame pairing for images, and the vision experts chosen per
token by a select instead of boolean indexing."""

from __future__ import annotations

import torch


def image_frames_paired(module: torch.nn.Module) -> None:
    # Ernie4_5_VLMoeVariableResolutionResamplerModel._temporal_slicing pairs even and odd frames
    # in a Python loop over the images, with range(0, t, 2) for each image's frame count t read
    # from the grid: values torch.export cannot trace for a grid given as an input. The graph's
    # grids are images', one frame each (Ernie's image processor has temporal_patch_size 1 and
    # makes (1, h, w) grids), and for one frame HF pairs every token of the image with itself,
    # in order: the features beside themselves. Videos, whose even and odd frames are paired
    # (half as many tokens), are no input of the image-text graphs.
    def temporal_slicing(hidden_states: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        return torch.cat([hidden_states, hidden_states], dim=-1)

    module._temporal_slicing = temporal_slicing


def experts_by_type(module: torch.nn.Module) -> None:
    # Ernie4_5_VLMoeMoeBlock sends text tokens to its text experts and image or video tokens
    # (moe_mm_token_type_ids not 0) to its vision experts, by boolean-mask indexing whose sizes
    # are data-dependent, behind a branch on moe_mm_token_type_ids.any(). Each token's experts
    # see that token alone, so both expert sets run on every token and the type selects, per
    # token, the output and router logits HF computes for it. The cost is both sets' experts on
    # every token. Without type ids (HF's cached steps, a text-only graph) every token is text.
    original = module.forward

    def forward(
        hidden_states: torch.Tensor, moe_mm_token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if moe_mm_token_type_ids is None:
            return original(hidden_states)
        batch, length, width = hidden_states.shape
        vision = moe_mm_token_type_ids.bool()
        text_states, text_logits = module.text_moe(hidden_states)
        vision_states, vision_logits = module.vision_moe(hidden_states)
        states = torch.where(
            vision[..., None],
            vision_states.reshape(batch, length, width),
            text_states.reshape(batch, length, width),
        )
        logits = torch.where(
            vision.reshape(-1, 1),
            vision_logits.reshape(-1, module.num_experts),
            text_logits.reshape(-1, module.num_experts),
        )
        if module.shared_experts is not None:
            states = states + module.shared_experts(hidden_states)
        return states, logits

    module.forward = forward
