"""Gemma 4: the vision pooler's kernel from the config, not from the patch count; the per-layer
embeddings' token ids recovered without nonzero."""

from __future__ import annotations

import torch


def pooled_by_kernel(module: torch.nn.Module) -> None:
    # Gemma4VisionPooler derives its kernel side from the shapes, k = int((patches // (patches //
    # k**2)) ** 0.5), pools only when patches != patches // k**2, builds one_hot(index, length)
    # and checks both by Python comparisons: each a guard on the patch count, so the trace held
    # for one count only. The image processor pads every image to a multiple of k**2 patches
    # (output_length = patches // k**2 soft tokens), where HF's k is exactly the config's
    # pooling_kernel_size and pooling always applies (k > 1). Here k is that constant, the pooling
    # runs whenever k > 1, and the one-hot is the index compared with arange(length): the same
    # weights, so the same average of each k x k block (padding patches, at -1, are zero and are
    # counted in no block's mask).
    pooler = module.pooler
    k = module.config.pooling_kernel_size

    def forward(
        hidden_states: torch.Tensor,
        pixel_position_ids: torch.Tensor,
        padding_positions: torch.Tensor,
        output_length: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden_states = hidden_states.masked_fill(padding_positions.unsqueeze(-1), 0.0)
        if k > 1:
            hidden_states, padding_positions = _pool(hidden_states, pixel_position_ids, k)
        return hidden_states.float() * pooler.root_hidden_size, padding_positions

    pooler.forward = forward


def _pool(
    hidden_states: torch.Tensor, positions: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean of each k x k block of patches by their (x, y), and which blocks hold any."""
    length = hidden_states.shape[1] // (k * k)
    clamped = positions.clamp(min=0)
    columns = clamped[..., 0].max(dim=-1, keepdim=True)[0] + 1
    block = torch.div(clamped, k, rounding_mode="floor")
    index = block[..., 0] + torch.div(columns, k, rounding_mode="floor") * block[..., 1]
    slots = torch.arange(length, device=positions.device)
    weights = (index.unsqueeze(-1) == slots).float() / (k * k)
    output = weights.transpose(1, 2) @ hidden_states.float()
    mask = torch.logical_not((weights == 0).all(dim=1))
    return output.to(hidden_states.dtype), mask


def per_layer_ids_by_lookup(module: torch.nn.Module) -> None:
    # Gemma 4's per-layer embeddings (hidden_size_per_layer_input) are looked up by token id.
    # Called with inputs_embeds alone (the VLM decoder graph's input), Gemma4TextModel recovers
    # the ids by finding each row of inputs_embeds in the scaled embedding table with
    # .nonzero(), which has no lowering and a data-dependent length, and fails on any row that
    # is no token's embedding: the merged image features. With input_ids, HF's Gemma4Model looks
    # up the pad token at image positions. Here the same exact-match search picks the matching
    # id per position (argmax over the vocabulary), and the pad id where no token matches (an
    # image feature): the ids HF's own forward uses.
    original = module.get_per_layer_inputs
    pad = module.config.pad_token_id or 0

    def get_per_layer_inputs(
        input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None = None
    ) -> torch.Tensor:
        if input_ids is None:
            table = module.embed_tokens.weight * module.config.hidden_size**0.5
            match = (inputs_embeds[:, :, None, :] == table[None, None]).all(dim=3)
            found = match.to(torch.int64).argmax(dim=-1)
            input_ids = torch.where(match.any(dim=-1), found, torch.full_like(found, pad))
        return original(input_ids, inputs_embeds)

    module.get_per_layer_inputs = get_per_layer_inputs
