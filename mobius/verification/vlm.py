"""Vision–language models (``vision_encoder`` + ``embedding`` + ``decoder_model``): the image
features, a prefill with one image in a batch of two (the other row text only, left-padded), a
cached step and greedy generation against HF ``generate`` (``mobius.testing.vlm.vlm_pairs``)."""

from __future__ import annotations

from typing import Any

import torch

from mobius.errors import ConfigError
from mobius.runtime.vlm import OnnxVisionLanguageModel
from mobius.testing.vlm import vlm_pairs
from mobius.verification import inputs, reference
from mobius.verification.request import Request, Result
from mobius.verification.session import opened

DEFAULT_PROMPT = "Describe the image."


def run(request: Request) -> Result:
    checkpoint, model, dtype = reference.load_for(request)
    runner = opened(
        lambda: OnnxVisionLanguageModel(request.package), request.package / "vision_encoder.onnx"
    )
    steps = max(request.new_tokens, 1)
    pixels = text = None
    described = "a random image, and random text with its image tokens in the first row"
    if request.given.image is not None:
        folders = (request.package, checkpoint.directory)
        pixels, text = processed(runner, request.given, folders)
        described = f"{request.given.describe()} in the first row, the text alone in the second"
    elif request.given.prompt is not None:
        raise ConfigError("--prompt for an image-text-to-text model needs --image too")
    comparison = vlm_pairs(model, request.package, steps, pixels, text, runner)
    described += f" (left-padded); a cached step; {steps} greedy tokens"
    return Result([comparison], reference.dtype_name(dtype), described)


def processed(
    runner: OnnxVisionLanguageModel, given: inputs.Given, folders: tuple
) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """The processor's pixels (the vision graph's inputs) and a batch of two texts: the prompt
    after the image's placeholder, and the prompt alone, left-padded."""
    proc = inputs.processor(*folders)
    token = getattr(proc, "image_token", None)
    if token is None:
        raise ConfigError(
            f"{type(proc).__name__} names no image token; verify this model without --image"
        )
    prompt = given.prompt or DEFAULT_PROMPT
    proc.tokenizer.padding_side = "left"
    try:
        out = proc(
            text=[f"{token}\n{prompt}", prompt],
            images=[inputs.load_image(given.image)],
            padding=True,
            return_tensors="pt",
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"the model's processor refused the inputs: {exc}") from None
    wanted = {i.name for i in runner.sessions["vision_encoder"].get_inputs()}
    missing = sorted(wanted - set(out))
    if missing:
        raise ConfigError(
            f"the processor gives no {', '.join(missing)} for the vision graph; verify without --image"
        )
    pixels: dict[str, Any] = {k: v for k, v in out.items() if k in wanted}
    return pixels, (out["input_ids"], out["attention_mask"])
