"""Tiny diffusers models and a tiny Stable Diffusion pipeline, every parameter randomised.

Sizes are the smallest that keep each block kind: two resolutions, one layer per block, cross
attention in one down and one up block. A pipeline's tokenizer is a character-level CLIP BPE
vocabulary written here (no download).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from mobius.testing.tiny import randomize

CROSS_DIM = 16
UNET_CONFIG: dict[str, Any] = {
    "block_out_channels": (8, 16),
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "sample_size": 8,
    "in_channels": 4,
    "out_channels": 4,
    "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": CROSS_DIM,
    "attention_head_dim": 4,
}
# The pipeline's UNet drops the mid block: it is a third of the UNet's trace and lowering (the
# test's slowest step), and the sweep (diffusers_configs.py) converts UNET_CONFIG with it.
PIPELINE_UNET_CONFIG: dict[str, Any] = {**UNET_CONFIG, "mid_block_type": None}
VAE_CONFIG: dict[str, Any] = {
    "block_out_channels": (8, 16),
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "sample_size": 32,
    "down_block_types": ("DownEncoderBlock2D", "DownEncoderBlock2D"),
    "up_block_types": ("UpDecoderBlock2D", "UpDecoderBlock2D"),
}


def save_model(model: torch.nn.Module, directory: Path, seed: int = 0) -> torch.nn.Module:
    """Randomise every parameter of ``model`` and save it as a diffusers (or transformers)
    model directory; returns the model in eval mode."""
    randomize(model, seed)
    model.eval()
    model.save_pretrained(directory, safe_serialization=True)
    return model


def save_pretrained(model: torch.nn.Module, directory: Path) -> None:
    """``model.save_pretrained`` in safetensors, where parameters are tied (UniDiffuser's caption
    decoder ties GPT-2's head to its token table) each name holding its own copy: diffusers
    refuses to save tensors that share memory, and its ``from_pretrained`` builds the model on
    meta without the tie, so a checkpoint it loads holds every name."""
    seen: set[tuple[int, int]] = set()
    tied = False
    for value in model.state_dict().values():
        key = (value.untyped_storage().data_ptr(), value.storage_offset())
        tied = tied or key in seen
        seen.add(key)
    if not tied:
        model.save_pretrained(directory, safe_serialization=True)
        return
    from safetensors.torch import save_file

    Path(directory).mkdir(parents=True, exist_ok=True)
    model.save_config(directory)
    copies = {name: value.clone().contiguous() for name, value in model.state_dict().items()}
    save_file(copies, str(Path(directory) / "diffusion_pytorch_model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip


def tiny_unet(
    directory: Path, seed: int = 0, config: dict[str, Any] | None = None
) -> torch.nn.Module:
    from diffusers import UNet2DConditionModel

    return save_model(UNet2DConditionModel(**(config or UNET_CONFIG)), directory, seed)


def tiny_vae(directory: Path, seed: int = 1) -> torch.nn.Module:
    from diffusers import AutoencoderKL

    return save_model(AutoencoderKL(**VAE_CONFIG), directory, seed)


def tiny_clip_text(directory: Path, seed: int = 2) -> torch.nn.Module:
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        hidden_size=CROSS_DIM, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        vocab_size=64, max_position_embeddings=16, bos_token_id=0, eos_token_id=1, pad_token_id=1,
    )  # fmt: skip
    return save_model(CLIPTextModel(config), directory, seed)


def write_tokenizer(directory: Path, max_length: int = 16) -> None:
    """A character-level CLIP tokenizer: the letters, each also as a word end, no merges."""
    from transformers import CLIPTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in letters:
        vocab[ch] = len(vocab)
        vocab[ch + "</w>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (directory / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    tokenizer = CLIPTokenizer(
        str(directory / "vocab.json"), str(directory / "merges.txt"), model_max_length=max_length
    )
    tokenizer.save_pretrained(directory)


def tiny_pipeline(directory: Path) -> Any:
    """A tiny StableDiffusionPipeline saved to ``directory`` (and returned, in PyTorch)."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline
    from transformers import CLIPTokenizer

    directory = Path(directory)
    unet = tiny_unet(directory / "unet", config=PIPELINE_UNET_CONFIG)
    vae = tiny_vae(directory / "vae")
    text_encoder = tiny_clip_text(directory / "text_encoder")
    write_tokenizer(directory / "tokenizer")
    tokenizer = CLIPTokenizer.from_pretrained(directory / "tokenizer")
    scheduler = EulerDiscreteScheduler(num_train_timesteps=100)
    pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )  # fmt: skip
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
