"""Parity of an encoder–decoder package with its HF model: encoder output, decoder prefill, one
cached step, and greedy generation token for token (HF ``generate``, ``num_beams=1``)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mobius.runtime.seq2seq import Seq2SeqRunner
from mobius.tasks.seq2seq import ONE_TOKEN_DECODERS, features_as_embeddings, speech_features
from mobius.tasks.seq2seq_images import takes_images
from mobius.testing.seq2seq_images import IMAGE_OVERRIDES, image_encoder_inputs
from mobius.testing.tiny import randomize
from mobius.verification.pairs import Comparison, Pair, Tokens, for_session, for_torch, to_numpy

PREFIX = 4  # decoder tokens in the prefill check
NEW_TOKENS = 12
# sizes that keep a speech encoder small: Whisper reads 2 * max_source_positions frames
SPEECH_OVERRIDES: dict[str, dict[str, Any]] = {
    "whisper": {"max_source_positions": 16, "num_mel_bins": 8, "begin_suppress_tokens": None},
    # its decoder attention reads num_key_value_heads, which its config class does not define
    # (checkpoints set it in config.json); its queries are viewed with it: as many as the heads
    "moonshine_streaming": {"num_key_value_heads": 4},
}
# routed experts in the tiny models (the shrunk configs' sparse steps leave none)
SPARSE_OVERRIDES: dict[str, dict[str, Any]] = {
    "nllb-moe": {"encoder_sparse_step": 1, "decoder_sparse_step": 2},
    "switch_transformers": {"encoder_sparse_step": 1, "decoder_sparse_step": 2},
}


def auto_class(config: Any) -> Any:
    from transformers import (
        AutoModelForImageTextToText,
        AutoModelForSeq2SeqLM,
        AutoModelForSpeechSeq2Seq,
    )
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING,
        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING,
    )

    if type(config) in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING:
        return AutoModelForSpeechSeq2Seq
    if type(config) in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING:
        return AutoModelForSeq2SeqLM
    return AutoModelForImageTextToText  # an image encoder-decoder (Florence-2, Pix2Struct, ...)


def tiny_seq2seq(model_type: str, directory: Path, *, seed: int = 0, **overrides: Any):
    """A tiny random-weight encoder–decoder checkpoint in ``directory``: (HF model, config)."""
    from mobius.testing.configs import tiny_config_for

    own = {
        **SPEECH_OVERRIDES.get(model_type, {}),
        **IMAGE_OVERRIDES.get(model_type, {}),
        **SPARSE_OVERRIDES.get(model_type, {}),
    }
    config = tiny_config_for(model_type, **{**own, **overrides})
    decoder = getattr(config, "decoder", None)
    if getattr(decoder, "is_decoder", True) is False:
        # a composite (EncoderDecoderConfig): its decoder attends causally and to the encoder,
        # as ``from_encoder_decoder_configs`` sets it
        decoder.is_decoder = decoder.add_cross_attention = True
        # and its checkpoints say how generation starts (a composite's own config does not)
        for name in ("decoder_start_token_id", "pad_token_id"):
            if getattr(config, name, None) is None:
                setattr(config, name, decoder.pad_token_id or 0)
    torch.manual_seed(seed)
    model = auto_class(config).from_config(config, attn_implementation="eager").eval()
    randomize(model, seed)
    model.save_pretrained(directory)
    # the reference is the model as loaded: Marian does not save its sinusoidal tables (it
    # recomputes them), so the randomised ones in memory are not what the checkpoint means
    loaded = auto_class(config).from_pretrained(directory, attn_implementation="eager")
    return loaded.eval(), config


def encoder_inputs(model: Any, batch: int = 2, length: int = 7, seed: int = 1) -> dict:
    """Random encoder inputs; text ones right-padded in the second row."""
    gen = torch.Generator().manual_seed(seed)
    config = model.config
    if takes_images(model):
        return image_encoder_inputs(model, batch, length, gen)
    params = inspect.signature(model.get_encoder().forward).parameters
    if "input_values" in params:  # raw audio
        return {"input_values": torch.randn(batch, 1600, generator=gen)}
    if features_as_embeddings(model):  # Pop2Piano: frames of the encoder's width, right-padded
        width = model.get_encoder().get_input_embeddings().embedding_dim
        mask = torch.ones(batch, 9, dtype=torch.int64)
        mask[1, -3:] = 0
        return {
            "input_features": torch.randn(batch, 9, width, generator=gen),
            "attention_mask": mask,
        }
    if "input_features" in params:
        layout, width, frames = speech_features(config)
        shape = (batch, width, frames) if layout == "channels_first" else (batch, 40, width)
        return {"input_features": torch.randn(*shape, generator=gen)}
    ids = torch.randint(3, vocab_size(config, "encoder") - 2, (batch, length), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, length - 2 :] = 0
    ids[1, length - 2 :] = config.pad_token_id if config.pad_token_id is not None else 0
    return {"input_ids": ids, "attention_mask": mask}


def vocab_size(config: Any, part: str) -> int:
    """The vocabulary of the encoder's or the decoder's tokens (a composite's sub-configs)."""
    own = getattr(config, "vocab_size", None)
    if isinstance(own, int):
        return own
    sub = getattr(config, part, None)  # a composite's encoder or decoder
    if sub is None:  # an image model's text config
        sub = config.get_text_config(decoder=True)
    return sub.vocab_size


def start_token(config: Any) -> int:
    for source in (config, config.get_text_config(decoder=True)):
        start = getattr(source, "decoder_start_token_id", None)
        if start is None:
            start = getattr(source, "pad_token_id", None)
        if start is not None:
            return start
    return 0


def hf_generate(model: Any, inputs: dict, new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Plain greedy ``generate`` (GenerationMixin's, so Whisper's own task/language handling is
    bypassed) with no forced or suppressed tokens and no stop: tokens and each step's logits."""
    from transformers import GenerationConfig, GenerationMixin

    config = model.config
    pad = getattr(config, "pad_token_id", None)
    settings = GenerationConfig(
        decoder_start_token_id=start_token(config),
        pad_token_id=config.get_text_config(decoder=True).pad_token_id if pad is None else pad,
        eos_token_id=None,
        max_new_tokens=new_tokens,
        num_beams=1,
        do_sample=False,
    )
    # generate fills settings left at their defaults from the model's own generation config
    # (BART's forced_eos_token_id): give the model this one for the call
    if features_as_embeddings(model):  # as Pop2Piano's own generate hands them to the encoder
        inputs = {**inputs, "inputs_embeds": inputs["input_features"]}
        del inputs["input_features"]
    own, model.generation_config = model.generation_config, settings
    try:
        with torch.no_grad():
            out = GenerationMixin.generate(
                model, **inputs, output_logits=True, return_dict_in_generate=True
            )
    finally:
        model.generation_config = own
    return out.sequences.numpy(), to_numpy(torch.stack(out.logits, 1))


def seq2seq_parity(model: Any, package: Path, new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """Max abs differences (encoder, prefill, step, generation logits) and whether the greedy
    tokens equal HF's."""
    compared = seq2seq_pairs(model, package, new_tokens)
    encoder, prefill, step, generated = (p.max_abs() for p in compared.pairs)
    return {
        "encoder_diff": encoder,
        "prefill_diff": prefill,
        "decode_diff": step,
        "generate_logits_diff": generated,
        "tokens_equal": compared.tokens.equal(),
        "tokens": compared.tokens.actual.tolist(),
        "hf_tokens": compared.tokens.expected.tolist(),
    }


def seq2seq_pairs(
    model: Any,
    package: Path,
    new_tokens: int = NEW_TOKENS,
    inputs: dict[str, torch.Tensor] | None = None,
    runner: Seq2SeqRunner | None = None,
) -> Comparison:
    """The encoder output, a decoder prefill of ``PREFIX`` tokens, one cached step and the
    logits of ``new_tokens`` greedy steps, against HF (its ``generate`` for the last), and the
    greedy tokens; on ``inputs`` (``encoder_inputs``' random batch of two by default)."""
    runner = runner or Seq2SeqRunner(package)
    inputs = inputs if inputs is not None else encoder_inputs(model)
    mask = inputs.get("attention_mask")
    np_mask = None if mask is None else mask.numpy()
    encoded = runner.encode(**for_session(runner.encoder, inputs))
    inputs = for_torch(model, inputs)
    gen = torch.Generator().manual_seed(2)
    vocab = vocab_size(model.config, "decoder")
    batch = len(next(iter(inputs.values())))
    start = torch.full((batch, 1), start_token(model.config))
    prefix = torch.cat([start, torch.randint(3, vocab - 2, (batch, PREFIX - 1), generator=gen)], 1)
    step = torch.randint(3, vocab - 2, (batch, 1), generator=gen)
    with torch.no_grad():
        hf_encoded = hf_encode(model, inputs, start)
        hidden = hf_encoded[0].clone()  # the decoder may add to it in place (Moonshine Streaming)
        extra = {} if mask is None else {"attention_mask": mask}
        first = _hf_prefill(model, hf_encoded, prefix, extra)
        second = model(
            encoder_outputs=hf_encoded,
            decoder_input_ids=step,
            past_key_values=first.past_key_values,
            use_cache=True,
            **extra,
        )
    logits, cache = runner.decode(prefix.numpy(), encoded, runner.empty_cache(encoded), np_mask)
    step_logits, _ = runner.decode(step.numpy(), encoded, cache, np_mask)
    tokens, hf_logits = hf_generate(model, inputs, new_tokens)
    ours, our_logits = _greedy_with_logits(runner, encoded, tokens[:, :1], np_mask, new_tokens)
    encoder, decoder = "encoder_model.onnx", "decoder_model.onnx"
    hidden_name = "last_hidden_state"
    return Comparison(
        [
            Pair(encoder, hidden_name, "", encoded[hidden_name], to_numpy(hidden)),
            Pair(decoder, "logits", "prefill", logits, to_numpy(first.logits), scores=True),
            Pair(
                decoder, "logits", "cached step", step_logits, to_numpy(second.logits), scores=True
            ),
            Pair(decoder, "logits", "generation", our_logits, hf_logits, scores=True),
        ],
        Tokens(decoder, ours, tokens),
    )


def _hf_prefill(model: Any, encoded: Any, prefix: torch.Tensor, extra: dict) -> Any:
    """HF's decoder on ``prefix`` with an empty cache: one call, or, for a decoder that takes one
    token per cached call (``tasks/seq2seq.ONE_TOKEN_DECODERS``: ProphetNet), one call per token
    as ``generate`` runs it, the logits concatenated and the last call's cache kept. ProphetNet's
    one-call multi-token forward is not that decoding: its predict stream's relative-position
    bias (``get_predict_relative_pos_embeddings``) is permuted as ``(sequence, ngram, head)``
    while its buckets run ``(ngram, head, sequence)``, so with more than one token each
    position's bias comes from other positions' states, later ones included."""
    from types import SimpleNamespace

    if model.config.model_type not in ONE_TOKEN_DECODERS:
        return model(encoder_outputs=encoded, decoder_input_ids=prefix, use_cache=True, **extra)
    cache, logits = None, []
    for t in range(prefix.shape[1]):
        out = model(
            encoder_outputs=encoded,
            decoder_input_ids=prefix[:, t : t + 1],
            past_key_values=cache,
            use_cache=True,
            **extra,
        )
        cache = out.past_key_values
        logits.append(out.logits)
    return SimpleNamespace(logits=torch.cat(logits, 1), past_key_values=cache)


def hf_encode(model: Any, inputs: dict, start: torch.Tensor) -> Any:
    """HF's encoder output: its encoder module's, or, where that module does not take every
    input (Florence-2 merges the image into the prompt first), the model forward's."""
    from transformers.modeling_outputs import BaseModelOutput

    from mobius.tasks.seq2seq_images import encoder_takes

    if encoder_takes(model, inputs):
        return model.get_encoder()(**inputs, return_dict=True)
    hidden = model(**inputs, decoder_input_ids=start).encoder_last_hidden_state
    return BaseModelOutput(last_hidden_state=hidden)


def _greedy_with_logits(runner, encoded, start, mask, new_tokens):
    cache, ids, picked, seen = runner.empty_cache(encoded), start, [start], []
    for _ in range(new_tokens):
        logits, cache = runner.decode(ids, encoded, cache, mask)
        seen.append(logits[:, -1])
        ids = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        picked.append(ids)
    return np.concatenate(picked, 1), np.stack(seen, 1)
