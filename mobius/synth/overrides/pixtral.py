"""Pixtral towers (Mistral 3, LightOnOCR): any number of images of any sizes, per patch.

HF's ``get_image_features`` takes the processor's batch, images padded to the largest
(``pixel_values`` ``[num_images, channels, height, width]``) and each image's size
(``image_sizes`` ``[num_images, 2]``), and loops over the sizes in Python three times: the
tower crops each image's patches and builds a block-diagonal attention mask, the patch merger
unfolds each image's grid, and the features are split per image. The count of features depends
on the sizes' values, which a trace cannot follow through a Python loop.

The override computes the same thing on the padded grid of patches of every image at once:

- the tower runs over all ``num_images * rows * columns`` patches; a patch attends to the real
  patches of its own image (the block-diagonal mask, padding keys masked out), with the same
  axial positions (its row and column); padding patches are computed and never read;
- the projector's norm is per patch; the merger takes each ``merge x merge`` block of the padded
  grid in HF's ``unfold`` order (channel, then block row, then block column), and keeps the
  blocks inside each image, image after image, row-major: HF's order. That last selection is the
  one data-dependent count (an unbacked size, as for Idefics' padding images).

Checked eagerly against HF's loop on two images of different sizes (tests/mobius/synth).
"""

from __future__ import annotations

from typing import Any

import torch


def tower_states(
    tower: torch.nn.Module, pixel_values: torch.Tensor, image_sizes: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every layer's states ``[num_images, rows, columns, hidden]`` on the padded patch grid
    (the embeddings after ``ln_pre`` first, as HF's ``hidden_states``), and which patches are
    real ``[num_images, rows, columns]``."""
    patch = tower.patch_size
    embeds = tower.patch_conv(pixel_values.to(tower.patch_conv.weight.dtype))
    images, hidden, rows, columns = embeds.shape
    row = torch.arange(rows, device=embeds.device)
    column = torch.arange(columns, device=embeds.device)
    sizes = image_sizes.to(torch.int64) // patch
    real = (row[None, :, None] < sizes[:, 0, None, None]) & (
        column[None, None, :] < sizes[:, 1, None, None]
    )
    states = tower.ln_pre(embeds.permute(0, 2, 3, 1).reshape(1, -1, hidden))
    grid_row, grid_column = torch.meshgrid(row, column, indexing="ij")
    positions = torch.stack([grid_row.flatten(), grid_column.flatten()], -1).repeat(images, 1)
    rotary = tower.patch_positional_embedding(states, positions)
    image = torch.arange(images, device=embeds.device)[:, None].expand(images, rows * columns)
    image = image.reshape(-1)
    allowed = (image[:, None] == image[None, :]) & real.reshape(1, -1)
    mask = torch.zeros(allowed.shape, dtype=states.dtype, device=states.device)
    mask = mask.masked_fill(~allowed, torch.finfo(states.dtype).min)[None, None]
    shape = (images, rows, columns, hidden)
    out = [states.reshape(shape)]
    for layer in tower.transformer.layers:
        states = layer(states, mask, position_embeddings=rotary)
        out.append(states.reshape(shape))
    return out, real


def merged_blocks(
    states: torch.Tensor, real: torch.Tensor, merge: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each ``merge x merge`` block of patches as one row of ``hidden * merge²`` features in HF's
    ``unfold`` order ``[num_images, block_rows, block_columns, hidden * merge²]``, and which
    blocks lie inside their image."""
    images, rows, columns, hidden = states.shape
    blocks = states.reshape(images, rows // merge, merge, columns // merge, merge, hidden)
    blocks = blocks.permute(0, 1, 3, 5, 2, 4).reshape(
        images, rows // merge, columns // merge, hidden * merge * merge
    )
    # a block is inside when its last patch is (the image's side in patches, floored to blocks)
    return blocks, real[:, merge - 1 :: merge, merge - 1 :: merge]


def padded_batch(module: torch.nn.Module) -> None:
    # Mistral3Model / LightOnOcrModel: see the module docstring
    tower = getattr(module, "vision_tower", None) or module.vision_encoder
    projector = getattr(module, "multi_modal_projector", None) or module.vision_projection
    merge = module.config.spatial_merge_size

    def get_image_features(
        pixel_values: torch.Tensor,
        image_sizes: torch.Tensor,
        vision_feature_layer: Any = None,
        **kwargs: Any,
    ) -> Any:
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        if vision_feature_layer is None:
            vision_feature_layer = getattr(module.config, "vision_feature_layer", -1)
        states, real = tower_states(tower, pixel_values, torch.as_tensor(image_sizes))
        if isinstance(vision_feature_layer, int):
            chosen = states[vision_feature_layer]
        else:
            chosen = torch.cat([states[i] for i in vision_feature_layer], dim=-1)
        blocks, inside = merged_blocks(projector.norm(chosen), real, merge)
        merged = projector.patch_merger.merging_layer(blocks[inside])
        features = projector.linear_2(projector.act(projector.linear_1(merged)))
        return BaseModelOutputWithPooling(last_hidden_state=states[-1], pooler_output=features)

    module.get_image_features = get_image_features
