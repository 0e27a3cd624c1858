"""Contracts for diffusion transformers (DiT, PixArt, SD3, Flux, ...) and ControlNets.

A transformer keeps its own ``forward`` argument names (CONTRACTS.md): each argument the model
requires, or that its config enables, is filled from a table of what such an argument is in
diffusers (``hidden_states`` latents, ``encoder_hidden_states`` text, ``pooled_projections``,
``timestep``, ``class_labels``, Flux's position ids ``img_ids`` and ``txt_ids``, ``guidance``).
A class with a required argument outside the table gets no contract (the caller says so).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from mobius.diffusers.tasks import (
    FRAMES,
    HEIGHT,
    IMAGE_SEQUENCE,
    WIDTH,
    DiffusersTask,
    _first,
    unet_condition_inputs,
    video_latents,
)
from mobius.errors import UnsupportedError
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = None  # the model's dtype
MICRO_CONDITIONS = ("original_size", "target_size", "crop_coords")
# arguments diffusers passes only as keyword dictionaries or switches: never graph inputs
OPTIONAL_CALL_ARGS = frozenset(
    {"return_dict", "cross_attention_kwargs", "joint_attention_kwargs", "attention_kwargs",
     "attention_mask", "encoder_attention_mask", "skip_layers", "controlnet_blocks_repeat",
     "block_controlnet_hidden_states", "controlnet_block_samples",
     "controlnet_single_block_samples", "guess_mode", "timestep_cond"}
)  # fmt: skip


def _text_width(cfg: Any) -> int | None:
    for name in ("joint_attention_dim", "caption_channels", "cross_attention_dim", "text_dim",
                 "text_embed_dim", "context_in_dim", "cap_feat_dim"):  # fmt: skip
        value = cfg.get(name)
        if isinstance(value, int):
            return value
    return None


# video transformers taking their latents frames first: [batch, frames, channels, h, w]
FRAMES_FIRST = ("CogVideoXTransformer3DModel", "ConsisIDTransformer3DModel")


def _latents(cfg: Any, layout: str) -> TensorSpec:
    """``layout``: "packed" (tokens), "image", "video" or "frames_first"."""
    channels = cfg.get("in_channels", 4)
    if cfg.get("num_vector_embeds"):  # VQ-Diffusion: one codebook index per latent pixel
        size = cfg.get("sample_size")
        return TensorSpec("hidden_states", torch.int64, (BATCH, size * size))
    if layout == "packed":
        return TensorSpec("hidden_states", FLOAT, (BATCH, IMAGE_SEQUENCE, channels))
    if layout == "video":
        return TensorSpec("hidden_states", FLOAT, (BATCH, channels, FRAMES, HEIGHT, WIDTH))
    if layout == "frames_first":
        return TensorSpec("hidden_states", FLOAT, (BATCH, FRAMES, channels, HEIGHT, WIDTH))
    return TensorSpec("hidden_states", FLOAT, (BATCH, channels, HEIGHT, WIDTH))


def _spec(name: str, cfg: Any, layout: str) -> TensorSpec | None:
    """The graph input for forward argument ``name``, or None when it is not one we know."""
    if name == "hidden_states":
        return _latents(cfg, layout)
    if name == "encoder_hidden_states" and _text_width(cfg):
        return TensorSpec(name, FLOAT, (BATCH, SEQUENCE, _text_width(cfg)))
    if name == "pooled_projections" and cfg.get("pooled_projection_dim"):
        return TensorSpec(name, FLOAT, (BATCH, cfg.get("pooled_projection_dim")))
    if name == "timestep":  # under "ada_norm" (VQ-Diffusion) one embedding index for the batch
        if cfg.get("norm_type") == "ada_norm" and cfg.get("num_embeds_ada_norm"):
            return TensorSpec(name, torch.int64, ())
        return TensorSpec(name, torch.float32, (BATCH,))
    if name == "class_labels" and cfg.get("num_embeds_ada_norm"):
        return TensorSpec(name, torch.int64, (BATCH,))
    if name in ("img_ids", "txt_ids"):  # one position per rotary axis
        axes = len(cfg.get("axes_dims_rope") or (0, 0, 0))
        return TensorSpec(name, FLOAT, (IMAGE_SEQUENCE if name == "img_ids" else SEQUENCE, axes))
    if name in MICRO_CONDITIONS:  # CogView's SDXL-like size conditioning, (height, width) each
        return TensorSpec(name, FLOAT, (BATCH, 2))
    if name == "guidance" and cfg.get("guidance_embeds"):
        return TensorSpec(name, torch.float32, (BATCH,))
    return None


# PixArt's size conditioning, passed in ``added_cond_kwargs``: (height, width) and their ratio
SIZE_CONDITIONS = (("resolution", 2), ("aspect_ratio", 1))


def size_conditioned(cfg: Any, cls: type) -> bool:
    """``cls`` under ``cfg`` embeds the image's resolution and aspect ratio (PixArt-alpha at
    1024 pixels: ``use_additional_conditions``, by default for a ``sample_size`` of 128)."""
    if "added_cond_kwargs" not in inspect.signature(cls.forward).parameters:
        return False
    flag = cfg.get("use_additional_conditions")
    if flag is not None:
        return bool(flag)
    if cls.__name__ == "Transformer2DModel" and cfg.get("norm_type") != "ada_norm_single":
        return False
    return cls.__name__ in ("PixArtTransformer2DModel", "Transformer2DModel") and (
        cfg.get("sample_size") == 128
    )


def _fixed_text(spec: TensorSpec, length: int) -> TensorSpec:
    dims = tuple(length if d == SEQUENCE else d for d in spec.dims)
    return TensorSpec(spec.name, spec.dtype, dims) if spec.name == "encoder_hidden_states" else spec


class TransformerTask(DiffusersTask):
    """``transformer``: the model's own argument names -> ``out_sample``."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.layout = (
            "packed" if "img_ids" in inspect.signature(cls.forward).parameters  # Flux-like tokens
            else "frames_first" if cls.__name__ in FRAMES_FIRST
            else "video" if video_latents(cls)
            else "image"
        )  # fmt: skip
        super().__init__("transformer", self._specs, self._call_model, ("out_sample",))

    def _specs(self, cfg: Any) -> list[TensorSpec]:
        specs = []
        for name, param in list(inspect.signature(self.cls.forward).parameters.items())[1:]:
            required = param.default is inspect.Parameter.empty
            if name == "encoder_attention_mask" and required:  # the text's padding: True = a token
                specs.append(TensorSpec(name, torch.bool, (BATCH, SEQUENCE)))
                continue
            if name in OPTIONAL_CALL_ARGS or param.kind is param.VAR_KEYWORD:
                continue
            spec = _spec(name, cfg, self.layout)
            if spec is not None:
                specs.append(spec)
            elif required:
                raise UnsupportedError(
                    f"{self.cls.__name__} needs '{name}', which its config gives no size for"
                )
        if self.layout == "frames_first" and not cfg.get("use_rotary_positional_embeddings"):
            # CogVideoX's sincos table spans max_text_seq_length text tokens and the latents:
            # the prompt is padded to that length (as its pipeline does)
            specs = [_fixed_text(s, cfg.get("max_text_seq_length", 226)) for s in specs]
        if size_conditioned(cfg, self.cls):
            specs += [TensorSpec(n, FLOAT, (BATCH, width)) for n, width in SIZE_CONDITIONS]
        return specs

    def optional_inputs(self, config: Any) -> set[str]:
        params = list(inspect.signature(self.cls.forward).parameters.items())[1:]
        return {n for n, p in params if p.default is not inspect.Parameter.empty}

    def _call_model(self, model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
        x, extra = dict(x), {}
        if "added_cond_kwargs" in inspect.signature(self.cls.forward).parameters:
            extra["added_cond_kwargs"] = {n: x.pop(n, None) for n, _ in SIZE_CONDITIONS}
        return (_first(model(**x, **extra, return_dict=False)),)


KNOWN_ARGS = frozenset(
    {"hidden_states", "encoder_hidden_states", "pooled_projections", "timestep",
     "class_labels", "img_ids", "txt_ids", "guidance", *MICRO_CONDITIONS}
)  # fmt: skip


def transformer_task(cls: type) -> DiffusersTask:
    """The contract of diffusion transformer ``cls``; UnsupportedError naming the first required
    argument outside the table."""
    params = list(inspect.signature(cls.forward).parameters.items())[1:]
    for name, param in params:
        required = param.default is inspect.Parameter.empty and param.kind not in (
            param.VAR_KEYWORD, param.VAR_POSITIONAL,
        )  # fmt: skip
        if required and name not in KNOWN_ARGS | OPTIONAL_CALL_ARGS:
            raise UnsupportedError(
                f"mobius has no I/O contract for the diffusers class {cls.__name__} yet: its "
                f"forward requires '{name}', which no contract fills"
            )
    return TransformerTask(cls)


# --- ControlNet -------------------------------------------------------------------------------


def controlnet_inputs(cfg: Any) -> list[TensorSpec]:
    """The UNet's inputs, the conditioning image (8x the latents: the conditioning embedding
    downsamples three times) and its scale."""
    specs = unet_condition_inputs(cfg)
    channels = cfg.get("conditioning_channels", 3)
    specs.insert(3, TensorSpec("controlnet_cond", FLOAT, (BATCH, channels, "image_height",
                                                          "image_width")))  # fmt: skip
    specs.insert(4, TensorSpec("conditioning_scale", torch.float32, ()))
    return specs


def call_controlnet(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    added = {k: x[k] for k in ("text_embeds", "time_ids") if k in x}
    down, mid = model(
        x["sample"], x["timestep"], x["encoder_hidden_states"], x["controlnet_cond"],
        x["conditioning_scale"], class_labels=x.get("class_labels"),
        added_cond_kwargs=added or None, return_dict=False,
    )  # fmt: skip
    return (*down, mid)


class ControlNetTask(DiffusersTask):
    """``controlnet``: ``down_block_res_samples.{i}`` and ``mid_block_res_sample``."""

    def __init__(self) -> None:
        super().__init__("controlnet", controlnet_inputs, call_controlnet, ())

    def outputs(self, config: Any) -> list[str]:
        cfg = config.hf_config
        blocks = len(cfg.get("down_block_types", ()))
        layers = cfg.get("layers_per_block", 2)
        count = 1 + blocks * layers + (blocks - 1)  # conv_in, each resnet, each downsampler
        return [f"down_block_res_samples.{i}" for i in range(count)] + ["mid_block_res_sample"]


CONTROLNET = ControlNetTask()
