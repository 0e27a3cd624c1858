"""Encoder–decoders (``encoder_model.onnx`` + ``decoder_model.onnx``: text, speech and image
encoders): the encoder output, a decoder prefill, one cached step and greedy generation against
HF ``generate`` (``mobius.testing.seq2seq.seq2seq_pairs``)."""

from __future__ import annotations

from mobius.errors import ConfigError
from mobius.runtime.seq2seq import Seq2SeqRunner
from mobius.runtime.wav import read_wav
from mobius.testing.seq2seq import PREFIX, seq2seq_pairs
from mobius.verification import inputs, reference
from mobius.verification.request import Request, Result
from mobius.verification.session import opened


def run(request: Request) -> Result:
    checkpoint, model, dtype = reference.load_for(request)
    runner = opened(lambda: Seq2SeqRunner(request.package), request.package / "encoder_model.onnx")
    names = {i.name for i in runner.encoder.get_inputs()}
    folders = (request.package, checkpoint.directory)
    given = request.given
    encoder_inputs = None
    described = "random encoder inputs, a batch of two (the second row padded)"
    if given != inputs.Given():
        encoder_inputs = {}
        if "input_ids" in names and given.prompt is not None:
            text = inputs.right_padded(inputs.tokenizer(*folders), given.prompt)
            encoder_inputs.update({k: v for k, v in text.items() if k in names})
        if "input_features" in names or "input_values" in names:
            if given.audio is None:
                raise ConfigError("this encoder reads audio: pass --audio")
            extractor = inputs.feature_extractor(*folders)
            rate = getattr(extractor, "sampling_rate", 16000)
            samples = read_wav(given.audio, rate)
            rows = [samples, samples[: max(1, len(samples) // 2)]]
            out = extractor(
                rows,
                sampling_rate=rate,
                padding="max_length" if "input_features" in names else True,
                return_attention_mask="attention_mask" in names,
                return_tensors="pt",
            )
            encoder_inputs.update({k: v for k, v in out.items() if k in names})
        if "pixel_values" in names:
            if given.image is None:
                raise ConfigError("this encoder reads images: pass --image")
            image = inputs.load_image(given.image)
            processed = inputs.image_processor(*folders)(
                images=[image, image.transpose(0)], return_tensors="pt"
            )
            encoder_inputs["pixel_values"] = processed["pixel_values"]
        missing = sorted(names - set(encoder_inputs))
        if missing:
            raise ConfigError(
                f"the encoder also takes {', '.join(missing)}, which --prompt, --image and "
                "--audio do not make here; verify without them (random inputs)"
            )
        described = given.describe() + ", each with a second, shorter or mirrored row"
    steps = max(request.new_tokens, 1)
    comparison = seq2seq_pairs(model, request.package, steps, encoder_inputs, runner)
    described += f"; decoder prefill of {PREFIX} tokens, a cached step, {steps} greedy tokens"
    return Result([comparison], reference.dtype_name(dtype), described)
