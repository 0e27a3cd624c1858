"""Phi-4-multimodal's image and audio features: its model has no features methods; its
``embed_tokens_extend`` computes both inside the forward (``Phi4MultimodalImageEmbedding``: a
Python loop over the images that lays each one's crops out by its ``image_sizes`` and cuts them
to the region its mask marks, by ``.item()``; ``Phi4MultimodalAudioEmbedding``: the conformer,
whose streaming mask is built in numpy, then one of two projections, each clip's first
``audio_embed_sizes`` rows). These functions compute the same rows with the model's own modules
as tensors, so the vision and audio graphs have features methods as the other families do
(``vlm_inputs.features_method``, ``audio_qwen2.OWN_FEATURES``).

The audio projection is the forward's ``audio_projection_mode``: ``vision`` where the call has
images, ``speech`` where it has none, so the audio graph takes it as an input (1: images, 0:
none) and computes both projections (two small linear layers), choosing by it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import BaseModelOutputWithPooling

from mobius.tasks.base import TensorSpec
from mobius.tasks.image_shape import IMAGES, image_shape

MODEL_TYPE = "phi4_multimodal"
MODE = "audio_projection_mode"  # the audio graph's input: 1 where the call has images
CROPS = "num_crops"  # the vision graph's axis of an image's crops
UNFOLD = 500  # the conformer's window (HF's max_seq_len): longer clips run in windows of it


def _extend(owner: Any) -> Any:
    """``embed_tokens_extend`` of the head (``model.embed_tokens_extend``) or the base model."""
    return getattr(owner, "model", owner).embed_tokens_extend


def phi4_image_features(
    self: Any,
    image_pixel_values: torch.Tensor,
    image_sizes: torch.Tensor,
    image_attention_mask: torch.Tensor,
    **kwargs: Any,
) -> BaseModelOutputWithPooling:
    """HF's ``Phi4MultimodalImageEmbedding.forward`` rows for every image, in order: per image
    its sub-crops' canvas cut to the mask's useful region, each canvas row followed by the
    ``sub_img_feature_extensor``, then ``global_img_feature_extensor``, then the global crop
    likewise, all projected. Each image's rows are slots of one fixed-length row (as many as
    its crops could make), gathered by index arithmetic and kept by a mask."""
    embed = _extend(self).image_embed
    images, crops = image_pixel_values.shape[:2]
    pixels = image_pixel_values.to(embed.img_processor.embeddings.patch_embedding.weight.dtype)
    masks = image_attention_mask.to(torch.bool)
    patches = embed.get_img_features(pixels.flatten(0, 1), attention_mask=masks.flatten(0, 1))
    side = int(patches.shape[1] ** 0.5)  # the compressed crop's side (HF's base_feat_size)
    width = patches.shape[-1]
    flat = patches.reshape(images, crops * side * side, width)
    sizes = image_sizes.reshape(-1, 2).to(torch.int64)
    across = sizes[:, 1:] // embed.crop_size  # crops per canvas row [images, 1]
    area = (sizes[:, :1] // embed.crop_size) * across
    # the useful region: HF sums the first column and the first row of the canvas of the
    # sub-crops' masks, downsampled as the features are
    small = image_attention_mask[:, 1:, 0::2, 0::2].to(torch.int64)
    sub = torch.arange(crops - 1, device=flat.device)[None, :]
    first_column = (sub % across == 0) & (sub < area)
    high = (small[:, :, :, 0].sum(-1) * first_column).sum(-1, keepdim=True)
    wide = (small[:, :, 0, :].sum(-1) * (sub < across)).sum(-1, keepdim=True)
    # slots: the sub canvas (high rows of wide + 1), one separator, the global crop's canvas
    per_row = wide + 1
    canvas = high * per_row
    slot = torch.arange(crops * side * (side + 1) + 1, device=flat.device)[None, :]
    row, column = slot // per_row, slot % per_row
    in_sub = slot < canvas
    sub_index = (1 + (row // side) * across + column // side) * side * side
    sub_index = sub_index + (row % side) * side + column % side
    after = slot - canvas - 1
    in_global = (after >= 0) & (after < side * (side + 1))
    global_row, global_column = after // (side + 1), after % (side + 1)
    global_index = global_row * side + global_column
    index = torch.where(in_sub, sub_index, torch.where(in_global, global_index, 0))
    index = index.clamp(0, crops * side * side - 1)
    gathered = torch.gather(flat, 1, index[..., None].expand(-1, -1, width))
    extensor = (in_sub & (column == wide)) | (in_global & (global_column == side))
    separator = slot == canvas
    rows = torch.where(
        extensor[..., None], embed.sub_img_feature_extensor.reshape(1, 1, -1), gathered
    )
    rows = torch.where(
        separator[..., None], embed.global_img_feature_extensor.reshape(1, 1, -1), rows
    )
    kept = rows[in_sub | separator | in_global].to(embed.img_projection_up.weight.dtype)
    features = embed.img_projection_down(F.gelu(embed.img_projection_up(kept)))
    return BaseModelOutputWithPooling(last_hidden_state=patches, pooler_output=features)


def phi4_audio_features(
    self: Any,
    audio_input_features: torch.Tensor,
    audio_embed_sizes: torch.Tensor,
    audio_attention_mask: torch.Tensor,
    audio_projection_mode: torch.Tensor,
    **kwargs: Any,
) -> BaseModelOutputWithPooling:
    """HF's ``Phi4MultimodalAudioEmbedding.forward`` rows: the conformer on the padded clips,
    the projection ``audio_projection_mode`` picks (nonzero: ``vision``, the forward's choice
    where the call has images), each clip's first ``audio_embed_sizes`` rows in batch order."""
    embed = _extend(self).audio_embed
    dtype = embed.up_proj_for_speech.weight.dtype
    hidden = conformer(embed.encoder, audio_input_features.to(dtype), audio_attention_mask.bool())
    speech = embed.down_proj_for_speech(F.gelu(embed.up_proj_for_speech(hidden)))
    vision = embed.down_proj_for_vision_speech(F.gelu(embed.up_proj_for_vision_speech(hidden)))
    with_images = audio_projection_mode.reshape(-1)[:1].reshape(()).bool()
    rows = torch.where(with_images, vision, speech)
    steps = torch.arange(rows.shape[1], device=rows.device)[None, :]
    kept = rows[steps < audio_embed_sizes.reshape(-1, 1)]
    return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=kept)


def conformer(encoder: Any, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``Phi4MultimodalAudioModel.forward``: the frames subsampled, then windows of ``UNFOLD``
    steps, each attending within its streaming chunks (``chunk_size``, ``left_chunk`` chunks
    back) under HF's mask plus the relative bias (HF adds the boolean mask to the bias: 1 where
    allowed, so padding is attended to, less). HF pads longer clips to whole windows and runs
    shorter ones unpadded: here one window's padding steps are kept out of every attention, so
    its real steps see what HF's do (the convolutions are causal: no real step reads a later
    one)."""
    config = encoder.config
    hidden, pad = encoder.embed(encoder.encoder_embedding(features), mask)
    batch, steps, width = hidden.shape
    # the count of windows as a value: torch.export writes the reshape to windows of a shape
    # derived length as valid for the example's one window only
    count = (hidden.new_zeros((), dtype=torch.int64) + steps + UNFOLD - 1) // UNFOLD
    windows = count.item()
    torch._check(windows >= 1)
    torch._check(windows * UNFOLD >= steps)
    padding = windows * UNFOLD - steps
    hidden = F.pad(hidden, (0, 0, 0, padding)).reshape(batch * windows, UNFOLD, width)
    real = F.pad(pad.reshape(batch, steps), (0, padding)).reshape(batch * windows, 1, UNFOLD)
    chunk = torch.arange(UNFOLD, device=hidden.device) // config.chunk_size
    stream = (chunk[None, :] >= chunk[:, None] - config.left_chunk) & (
        chunk[None, :] <= chunk[:, None]
    )
    allowed = real & stream[None]
    bias = encoder.relative_attention_bias_layer(hidden)
    beyond = torch.arange(UNFOLD, device=hidden.device) >= steps
    outside = beyond & (count == 1)
    lowest = torch.finfo(bias.dtype).min
    attention = allowed.unsqueeze(1) + bias + torch.where(outside, lowest, 0.0).to(bias.dtype)
    for layer in encoder.encoders:
        hidden = layer(hidden, attention)
    return hidden.reshape(batch, windows * UNFOLD, width)[:, :steps]


def _crops(name: str, config: Any) -> TensorSpec:
    """Each image's crops (the global view, then the sub-crops, padded to the most crops of any
    image) at the tower's size."""
    return TensorSpec(name, None, (IMAGES, CROPS, *image_shape(config.hf_config.vision_config)))


def _crop_masks(name: str, config: Any) -> TensorSpec:
    """Each crop's mask of real patches (1: real), as its crops are laid out (``_crops``)."""
    vision = config.hf_config.vision_config
    side = image_shape(vision)[1] // vision.patch_size
    return TensorSpec(name, None, (IMAGES, CROPS, side, side))


# model type -> the features method of a model with none of its own (vlm_inputs.features_method)
OWN_IMAGE_FEATURES = {MODEL_TYPE: phi4_image_features}
# the vision graph's inputs for its arguments (vlm_inputs.extra_vision_inputs)
IMAGE_INPUTS = {"image_pixel_values": _crops, "image_attention_mask": _crop_masks}
