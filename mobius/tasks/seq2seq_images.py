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

from mobius.config import ArchitectureConfig
from mobius.tasks.base import BATCH, TensorSpec

ENCODER_SEQUENCE = "encoder_sequence_length"
HEIGHT, WIDTH = "image_height", "image_width"
IMAGE_ARGUMENTS = ("pixel_values", "flattened_patches")


def _params(method: Any) -> set[str]:
    return set(inspect.signature(method).parameters)


def vision_config(hf: Any) -> Any:
    """The sub-config that says the image size: ``vision_config``, a composite's ``encoder``
    (``VisionEncoderDecoderConfig``), else the model's own (UDOP)."""
    for name in ("vision_config", "encoder"):
        sub = getattr(hf, name, None)
        if sub is not None and not isinstance(sub, (dict, bool)):
            return sub
    return hf


def _pixels(config: ArchitectureConfig) -> TensorSpec:
    vision = vision_config(config.hf_config)
    channels = getattr(vision, "num_channels", None) or getattr(vision, "in_channels", None) or 3
    size = getattr(vision, "image_size", None) or getattr(config.hf_config, "image_size", None)
    if isinstance(size, (list, tuple)):
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
    specs.append(_pixels(config))
    return specs


class _Encoded(Exception):
    """Carries the encoder module's output out of the model's forward."""

    def __init__(self, output: Any) -> None:
        super().__init__("encoded")
        self.output = output


def encode(model: torch.nn.Module, inputs: dict[str, torch.Tensor], text_phase: Any) -> Any:
    """The encoder's output for ``inputs``. An encoder module that takes them all is called
    directly; otherwise the model's forward runs until its encoder module returns (the image
    merged into the prompt by the model's own code). ``text_phase`` (a context manager) holds
    while the encoder module runs; what runs before it (a vision tower) attends both ways over
    its own positions, with no padding (``GraphPhase("encoder")``)."""
    from patterns.seq2seq_attention import GraphPhase, phase

    encoder = model.get_encoder()
    if set(inputs) <= _params(encoder.forward):
        with text_phase:
            return encoder(**inputs, return_dict=True)
    entered: list[Any] = []

    def enter(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        text_phase.__enter__()
        entered.append(text_phase)

    def leave(module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        raise _Encoded(output)

    hooks = [
        encoder.register_forward_pre_hook(enter, with_kwargs=True),
        encoder.register_forward_hook(leave, with_kwargs=True),
    ]
    with phase(GraphPhase("encoder")):
        try:
            model(**inputs, decoder_input_ids=_one_token(inputs), return_dict=True)
        except _Encoded as done:
            return done.output
        finally:
            for hook in hooks:
                hook.remove()
            while entered:  # before the outer phase is reset
                entered.pop().__exit__(None, None, None)
    raise RuntimeError(f"{type(model).__name__}'s forward never called its encoder module")


def _one_token(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    batch = next(iter(inputs.values())).shape[0]
    return torch.zeros((batch, 1), dtype=torch.long, device=next(iter(inputs.values())).device)
