"""Random encoder inputs for image encoder–decoders (``mobius/tasks/seq2seq_images.py``), in the
layout the encoder graph takes: a batch of two images; a prompt the encoder reads beside them
(Florence-2, UDOP) right-padded in the second row, with the image tokens the features replace."""

from __future__ import annotations

from typing import Any

import torch

from mobius.sources.config import from_hf
from mobius.tasks.seq2seq_images import image_inputs

# per type, what makes the shrunk config consistent (each HF model fails its own forward without)
IMAGE_OVERRIDES: dict[str, dict[str, Any]] = {
    # d_kv stays 64 while the heads shrink to 4 over a 64-wide model: 16 per head
    "pix2struct": {"text_config": {"d_kv": 16}, "vision_config": {"d_kv": 16}},
    # the projector's convolutions and its output keep their real widths (256 -> 512 -> 1024 ->
    # the decoder's 512); the tiny decoder is 64 wide
    "pp_formulanet": {
        "vision_config": {
            "post_conv_mid_channels": 32,
            "post_conv_out_channels": 64,
            "decoder_hidden_size": 64,
        }
    },
    # the shrinking sets every stage's patch to 8, wider than the later stages' inputs: the real
    # (7, 3, 3, 3)
    "florence2": {"vision_config": {"patch_size": [7, 3, 3, 3]}},
    # 4 patches a side pooled to 2 x 2 image tokens (the real 256 would pool by a kernel of 0)
    "t5gemma2": {"encoder": {"mm_tokens_per_image": 4}},
}
SIDE = 32  # an image of any size: this many pixels a side
OWN_SIDE = {"florence2": 768}  # its graph's one size (seq2seq_images.FIXED_SIDES)
PATCHES = 8  # Pix2Struct: patches per image, the last three of the second row padding


def image_encoder_inputs(model: Any, batch: int, length: int, gen: torch.Generator) -> dict:
    specs = {s.name: s for s in image_inputs(from_hf(model.config), model)}
    if "flattened_patches" in specs:
        return flattened_patches(specs["flattened_patches"].dims[-1], batch, gen)
    side = OWN_SIDE.get(model.config.model_type, SIDE)
    dims = [d if isinstance(d, int) else side for d in specs["pixel_values"].dims[1:]]
    out = {"pixel_values": torch.randn(batch, *dims, generator=gen)}
    if "input_ids" in specs:
        out.update(_prompt(model, out["pixel_values"], batch, length, gen))
    if "bbox" in specs:  # each word's box, (x0, y0, x1, y1) in [0, 1]
        corners = torch.rand(batch, out["input_ids"].shape[1], 2, 2, generator=gen)
        low, high = corners.min(-2).values, corners.max(-2).values
        out["bbox"] = torch.cat([low, high], -1)
    return out


def flattened_patches(width: int, batch: int, gen: torch.Generator) -> dict:
    """Patches of a 2 x 4 grid: (row, column) from 1, then the pixels; the second image's last
    three patches padding (zeros with a zero mask, as the processor pads them)."""
    rows = torch.arange(PATCHES) // 4 + 1
    columns = torch.arange(PATCHES) % 4 + 1
    pixels = torch.randn(batch, PATCHES, width - 2, generator=gen)
    grid = torch.stack([rows, columns], -1).float().expand(batch, -1, -1)
    patches = torch.cat([grid, pixels], -1)
    mask = torch.ones(batch, PATCHES, dtype=torch.int64)
    if batch > 1:
        mask[1, PATCHES - 3 :] = 0
        patches[1, PATCHES - 3 :] = 0.0
    return {"flattened_patches": patches, "attention_mask": mask}


def _prompt(model: Any, pixels: torch.Tensor, batch: int, length: int, gen: torch.Generator):
    """Token ids with one image's tokens first (where the model has an image token) and
    ``length`` text tokens, the second row's last two padding."""
    config = model.config
    text = config.get_text_config(decoder=True)
    vocab = text.vocab_size
    token = getattr(config, "image_token_id", None)
    pad = text.pad_token_id if text.pad_token_id is not None else 0
    ids = torch.randint(3, vocab - 2, (batch, length), generator=gen)
    ids[(ids == token) | (ids == pad)] = 4
    if token is not None:
        with torch.no_grad():
            count = model.get_image_features(pixels[:1]).pooler_output.shape[1]
        ids = torch.cat([torch.full((batch, count), token), ids], 1)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    ids[1, -2:] = pad
    return {"input_ids": ids, "attention_mask": mask}
