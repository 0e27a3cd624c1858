"""Single-call tasks (feature-extraction, fill-mask, the classifiers, question answering,
multiple choice, vision and audio heads, dual encoders): every contract output on a padded batch
of two (``mobius.testing.parity.contract_pairs``)."""

from __future__ import annotations

from typing import Any

import torch

from mobius.errors import ConfigError
from mobius.runtime.causal_lm import MODEL_FILE, session
from mobius.runtime.wav import read_wav
from mobius.testing.parity import contract_feeds, contract_pairs
from mobius.verification import inputs, quantized, reference
from mobius.verification.pairs import Comparison
from mobius.verification.request import Request, Result
from mobius.verification.session import opened


def run(request: Request) -> Result:
    checkpoint, model, dtype = reference.load_for(request)
    sess = opened(lambda: session(request.package), request.package / MODEL_FILE)
    folders = (request.package, checkpoint.directory)
    feeds, described = given_feeds(request.given, sess, folders)
    if feeds is None:
        feeds = contract_feeds(sess, model.config)
        described = (
            "random inputs by the contract: a batch of two, padded where the input has a mask"
        )

    def compare() -> Comparison:
        return Comparison(contract_pairs(model, request.package, model.config, feeds, sess))

    comparisons = quantized.compare(model, request.manifest, compare)
    return Result(comparisons, reference.dtype_name(dtype), described)


def given_feeds(given: inputs.Given, sess: Any, folders: tuple) -> tuple[dict | None, str]:
    """The graph's inputs made from the user's prompt, image or audio (None: none given)."""
    shapes = {i.name: i.shape for i in sess.get_inputs()}
    if given == inputs.Given():
        return None, ""
    feeds: dict[str, torch.Tensor] = {}
    if "input_ids" in shapes:
        if given.prompt is None:
            raise ConfigError("this graph reads text: pass --prompt")
        if len(shapes["input_ids"]) == 3:
            raise ConfigError("--prompt does not make multiple-choice inputs; verify without it")
        text = inputs.right_padded(inputs.tokenizer(*folders), given.prompt)
        feeds.update({k: v for k, v in text.items() if k in shapes})
        if "token_type_ids" in shapes and "token_type_ids" not in feeds:
            feeds["token_type_ids"] = torch.zeros_like(feeds["input_ids"])
    if "pixel_values" in shapes:
        if given.image is None:
            raise ConfigError("this graph reads images: pass --image")
        image = inputs.load_image(given.image)
        mirrored = image.transpose(0)  # PIL's FLIP_LEFT_RIGHT: a second, different image
        processed = inputs.image_processor(*folders)(images=[image, mirrored], return_tensors="pt")
        feeds["pixel_values"] = processed["pixel_values"]
    if "input_values" in shapes or "input_features" in shapes:
        if given.audio is None:
            raise ConfigError("this graph reads audio: pass --audio")
        extractor = inputs.feature_extractor(*folders)
        rate = getattr(extractor, "sampling_rate", 16000)
        samples = read_wav(given.audio, rate)
        rows = [samples, samples[: max(1, len(samples) // 2)]]
        wants_mask = "attention_mask" in shapes
        out = extractor(
            rows,
            sampling_rate=rate,
            padding=True,
            return_attention_mask=wants_mask,
            return_tensors="pt",
        )
        feeds.update({k: v for k, v in out.items() if k in shapes})
    return (
        feeds,
        given.describe() + ", each with a second, shorter or mirrored row (a batch of two)",
    )
