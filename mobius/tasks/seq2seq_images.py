"""Encoder–decoder image-text-to-text models (Florence-2, Pix2Struct, PP-FormulaNet, UDOP,
``VisionEncoderDecoderModel``): the image side of ``seq2seq.py``'s encoder graph.

The encoder graph takes the images under the HF forward's own argument names and in its layout,
as it takes speech features: ``pixel_values`` ``[batch, channels, height, width]``, Pix2Struct's
``flattened_patches`` ``[batch, encoder_sequence_length, 2 + patch pixels]`` with the patches'
``attention_mask``, and, where the encoder reads text beside the image (Florence-2's prompt, with
image tokens the features replace; UDOP's words and their ``bbox``), ``input_ids`` and
``attention_mask`` too. Which inputs follow from the signatures of the model's ``forward`` and of
its encoder module, not from the family.

Where the encoder module does not take the image itself (Florence-2: the vision tower's features
are merged into the text embeddings before the text encoder), the model's own ``forward`` runs
up to the encoder's output and stops there (``encode``): the merge is the model's code.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, TensorSpec
from mobius.tasks.seq2seq_phase import GraphPhase, enter_phase, phase
from mobius.tasks.vlm_inputs import check_pooled_grid

ENCODER_SEQUENCE = "encoder_sequence_length"
HEIGHT, WIDTH = "image_height", "image_width"
IMAGE_ARGUMENTS = ("pixel_values", "flattened_patches")


# towers whose graph takes one image size, where the vision config names none: (height, width,
# why). Florence-2's DaViT (four strided stages, each padding its windows) over symbolic image
# sides keeps torch.export's shape reasoning (sympy) busy for over 15 minutes; its processor
# resizes every image to 768 x 768.
FIXED_SIDES: dict[str, tuple[int, int, str]] = {
    "florence2": (
        768,
        768,
        "Florence-2's DaViT tower over symbolic image sides (four strided stages, each padding "
        "its windows) keeps torch.export's shape reasoning busy for over 15 minutes; the graph "
        "takes the 768 x 768 images its processor makes",
    )
}


def fixed_size_fallbacks(config: ArchitectureConfig) -> list[Any]:
    """The encoder graph takes one image size (``FIXED_SIDES``): a fallback, with its reason."""
    from mobius.fallbacks import ANY_IMAGE_SIZE, FIXED_IMAGE_SIZE, Fallback

    fixed = FIXED_SIDES.get(config.model_type)
    if fixed is None:
        return []
    return [Fallback(FIXED_IMAGE_SIZE, fixed[2], (ANY_IMAGE_SIZE,))]


def _params(method: Any) -> set[str]:
    return set(inspect.signature(method).parameters)


def vision_config(hf: Any) -> Any:
    """The sub-config that says the image size: ``vision_config``, a composite's ``encoder``
    (``VisionEncoderDecoderConfig``) or that encoder's ``vision_config`` (T5Gemma 2), else the
    model's own (UDOP)."""
    for name in ("vision_config", "encoder"):
        sub = getattr(hf, name, None)
        if sub is not None and not isinstance(sub, (dict, bool)):
            # an encoder config with its own vision config (T5Gemma 2's)
            own = getattr(sub, "vision_config", None)
            return own if own is not None and not isinstance(own, dict) else sub
    return hf


def _pixels(config: ArchitectureConfig) -> TensorSpec:
    vision = vision_config(config.hf_config)
    channels = getattr(vision, "num_channels", None) or getattr(vision, "in_channels", None) or 3
    size = getattr(vision, "image_size", None) or getattr(config.hf_config, "image_size", None)
    if config.model_type in FIXED_SIDES:
        height, width, _ = FIXED_SIDES[config.model_type]
    elif isinstance(size, (list, tuple)):
        height, width = size
    elif isinstance(size, int):
        height = width = size
    else:  # any size: axes the trace names
        height, width = HEIGHT, WIDTH
    return TensorSpec("pixel_values", None, (BATCH, channels, height, width))


def takes_images(model: torch.nn.Module) -> bool:
    """The model's forward (or its encoder's) takes an image argument."""
    own = _params(model.forward) | _params(model.get_encoder().forward)
    return any(name in own for name in IMAGE_ARGUMENTS)


def image_inputs(config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec] | None:
    """The encoder graph's inputs of an image encoder–decoder; None for a model without images."""
    if not takes_images(model):
        return None
    forward, encoder = _params(model.forward), _params(model.get_encoder().forward)
    if "flattened_patches" in encoder:  # Pix2Struct: patches padded per image, and their mask
        width = 2 + vision_config(config.hf_config).patch_embed_hidden_size
        return [
            TensorSpec("flattened_patches", None, (BATCH, ENCODER_SEQUENCE, width)),
            TensorSpec("attention_mask", torch.int64, (BATCH, ENCODER_SEQUENCE)),
        ]
    specs = []
    if "input_ids" in encoder and "input_ids" in forward:  # a prompt the encoder reads
        specs += [
            TensorSpec("input_ids", torch.int64, (BATCH, ENCODER_SEQUENCE)),
            TensorSpec("attention_mask", torch.int64, (BATCH, ENCODER_SEQUENCE)),
        ]
        if "bbox" in encoder and "bbox" in forward:  # each word's box (UDOP), in [0, 1]
            specs.append(TensorSpec("bbox", None, (BATCH, ENCODER_SEQUENCE, 4)))
    # T5Gemma 2 pools its tower's patches to the encoder config's mm_tokens_per_image, as Gemma 3
    check_pooled_grid(getattr(config.hf_config, "encoder", config.hf_config))
    specs.append(_pixels(config))
    return specs


def encoder_takes(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> bool:
    """The encoder module takes every input of the encoder graph itself."""
    return set(inputs) <= _params(model.get_encoder().forward)


def encode_through_forward(
    model: torch.nn.Module, inputs: dict[str, torch.Tensor], text_phase: Any, cache: Any
) -> torch.Tensor:
    """The encoder's output for ``inputs`` when its module does not take them all (Florence-2):
    one call of the model's forward on them and one placeholder decoder token, which fills
    ``cache``'s cross-attention part as the encoder graph's placeholder call does. Attention
    phases follow the encoder module (forward hooks): before it (a vision tower) the encoder's
    over its own positions, with no padding; in it ``text_phase``; after it, the placeholder's
    (the decoder). The outer ``phase`` restores the caller's phase at the end."""
    from mobius.tasks.causal_lm import cache_argument

    def enter(module: torch.nn.Module, args: Any) -> None:
        enter_phase(text_phase)

    def leave(module: torch.nn.Module, args: Any, output: Any) -> None:
        enter_phase(GraphPhase("placeholder"))  # what runs next: the decoder's placeholder call

    encoder = model.get_encoder()
    hooks = [encoder.register_forward_pre_hook(enter), encoder.register_forward_hook(leave)]
    first = next(iter(inputs.values()))
    token = torch.zeros((first.shape[0], 1), dtype=torch.long, device=first.device)
    try:
        with phase(GraphPhase("encoder")):
            out = model(
                **inputs,
                decoder_input_ids=token,
                use_cache=True,
                return_dict=True,
                **{cache_argument(model): cache},
            )
    finally:
        for hook in hooks:
            hook.remove()
    return out.encoder_last_hidden_state
