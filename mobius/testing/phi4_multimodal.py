"""Phi-4-multimodal's inputs as its processor lays them out, and HF's own rows for them
(``tasks/phi4_multimodal.py`` computes those rows as features methods; the references here run
HF's ``embed_tokens_extend`` modules, which place them at the placeholder tokens)."""

from __future__ import annotations

from typing import Any

import torch

from mobius.testing.config_tables import HIDDEN

# the shrunk config's placeholder, pad and end tokens are all 255: distinct ones; crops at the
# tower's size (448 and 448 in the real config); a 2-block conformer whose convolutions keep its
# width (their channels must equal hidden_size: 1024 in the real config), 16 mel bins (three
# stride-2 convolutions leave 2: nemo_final_size), and streaming chunks of 4 steps seeing 2
# chunks back with a relative bias clipped at 8 steps, so both bite on clips of 25 steps
OVERRIDES: dict[str, Any] = {
    "bos_token_id": 1,
    "pad_token_id": 0,
    "eos_token_id": 2,
    "vision_config": {"crop_size": 32, "image_token_id": 250},
    "audio_config": {
        "audio_token_id": 251,
        "num_blocks": 2,
        "nemo_conv_channels": 16,
        "depthwise_separable_out_channel": HIDDEN,
        "ext_pw_out_channel": HIDDEN,
        "input_size": 16,
        "nemo_final_size": 2,
        "left_chunk": 2,
        "bias_max_distance": 8,
    },
}
# one image resized to 2 x 3 crops whose last 3 patch columns and 2 patch rows are padding, and
# one crop more than it has (another image of the batch with more crops pads it so)
CROP_GRID, PAD_PATCHES, SPARE_CROPS = (2, 3), (2, 3), 1


def phi4_pixels(model: Any, seed: int = 3) -> dict[str, torch.Tensor]:
    """``image_pixel_values`` ``[1, crops, 3, size, size]`` (the global view first),
    ``image_sizes`` (the resized image's height and width) and ``image_attention_mask``
    ``[1, crops, patches, patches]`` as the processor makes them for one image."""
    vision = model.config.vision_config
    size, side = vision.crop_size, vision.image_size // vision.patch_size
    high, wide = CROP_GRID
    canvas = torch.ones(high * side, wide * side)
    canvas[-PAD_PATCHES[0] :, :] = 0
    canvas[:, -PAD_PATCHES[1] :] = 0
    subs = canvas.reshape(high, side, wide, side).transpose(1, 2).reshape(-1, side, side)
    spare = torch.ones(SPARE_CROPS, side, side)
    masks = torch.cat([torch.ones(1, side, side), subs, spare])
    gen = torch.Generator().manual_seed(seed)
    pixels = torch.randn(1, len(masks), 3, size, size, generator=gen)
    pixels[0, -SPARE_CROPS:] = 0
    return {
        "image_pixel_values": pixels,
        "image_sizes": torch.tensor([[high * size, wide * size]]),
        "image_attention_mask": masks[None],
    }


def image_tokens(model: Any) -> int:
    """The placeholder tokens of ``phi4_pixels``' image: the sub-crops' canvas cut to its
    real patches (every other one, each row with a separator), one separator, the global view."""
    vision = model.config.vision_config
    side = vision.image_size // vision.patch_size
    high, wide = (CROP_GRID[i] * side - PAD_PATCHES[i] for i in (0, 1))
    half = (side + 1) // 2
    return -(-high // 2) * (-(-wide // 2) + 1) + 1 + half * (half + 1)


def phi4_audio(model: Any, frames: int = 200, lengths=(1.0, 0.625), seed: int = 3) -> dict:
    """Two log-mel clips ``[2, frames, mel]`` padded to the longer with noise (HF's conformer
    reads the padding too), their mask, each clip's audio tokens (the processor's
    ``audio_embed_sizes``), and ``audio_projection_mode`` 1 (the call has an image)."""
    audio = model.config.audio_config
    gen = torch.Generator().manual_seed(seed)
    real = torch.tensor([int(frames * f) for f in lengths])
    mask = torch.arange(frames)[None, :] < real[:, None]
    values = torch.randn(len(lengths), frames, audio.input_size, generator=gen)
    return {
        "audio_input_features": values,
        "audio_attention_mask": mask.to(torch.int64),
        "audio_embed_sizes": -(-real // audio.time_reduction),
        "audio_projection_mode": torch.ones(1, dtype=torch.int64),
    }


def hf_image_rows(model: Any, pixels: dict[str, torch.Tensor]) -> torch.Tensor:
    """HF's image rows: its image embedding on a prompt of ``image_tokens`` placeholders."""
    embed = model.model.embed_tokens_extend.image_embed
    count = image_tokens(model)
    ids = torch.full((1, count), model.config.vision_config.image_token_id)
    with torch.no_grad():
        return embed(ids, torch.zeros(1, count, model.config.hidden_size), **pixels)[0]


def hf_audio_rows(model: Any, audio: dict[str, torch.Tensor]) -> torch.Tensor:
    """HF's audio rows (the projection of a call with images): its audio embedding on a
    prompt of every clip's placeholders."""
    embed = model.model.embed_tokens_extend.audio_embed
    count = int(audio["audio_embed_sizes"].sum())
    ids = torch.full((1, count), model.config.audio_config.audio_token_id)
    with torch.no_grad():
        return embed(
            ids,
            torch.zeros(1, count, model.config.hidden_size),
            audio_input_features=audio["audio_input_features"],
            audio_embed_sizes=audio["audio_embed_sizes"],
            audio_attention_mask=audio["audio_attention_mask"].bool(),
            audio_projection_mode="vision" if int(audio["audio_projection_mode"]) else "speech",
        )[0]


def hf_audio_inputs(audio: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The audio inputs the HF forward takes (it chooses the projection itself)."""
    return {k: v for k, v in audio.items() if k != "audio_projection_mode"}
