"""Encoder–decoder tasks: two graphs, ``encoder_model`` and ``decoder_model`` (CONTRACTS.md,
"Encoder–decoder tasks").

A task with ``graphs`` describes several graphs, each one an ordinary ``Task`` (its own inputs,
outputs and call into the same HF model); the driver traces, emits and binds each one in turn.

- ``encoder_model``: the HF encoder, then every decoder layer's cross-attention keys and values of
  its output. Those come from the model's own code: the wrapper runs the decoder once on one
  placeholder token with an empty ``EncoderDecoderCache`` and reads what the cross-attention
  layers stored; the decoder's own work is dead code, dropped after the trace.
- ``decoder_model``: the HF model called with ``encoder_outputs`` and an ``EncoderDecoderCache``
  whose cross part is filled from ``past_key_values.{i}.encoder.*`` and marked as computed
  (``is_updated``), and whose self part holds ``past_key_values.{i}.decoder.*``. The model then
  counts positions (BART's learned table, T5's relative buckets) from the self cache's length.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, Task, TensorSpec
from mobius.tasks.causal_lm import cache_argument
from mobius.tasks.seq2seq_phase import GraphPhase, phase
from mobius.tasks.vlm import masks_without_vmap

ENCODER_SEQUENCE = "encoder_sequence_length"
DECODER_SEQUENCE = "decoder_sequence_length"
PAST_DECODER = "past_decoder_sequence_length"
AUDIO_FRAMES = "num_frames"  # speech features, before the encoder's subsampling
AUDIO_SAMPLES = "num_samples"  # raw audio
# example sizes for the trace: distinct, so that export never unifies two dimensions
_SIZES = {
    BATCH: 2,
    ENCODER_SEQUENCE: 6,
    DECODER_SEQUENCE: 3,
    PAST_DECODER: 5,
    AUDIO_FRAMES: 40,
    AUDIO_SAMPLES: 1600,
    "image_height": 64,  # images of any size (seq2seq_images.py)
    "image_width": 96,
}


def _decoder_config(config: ArchitectureConfig) -> Any:
    """The decoder's own config (T5Gemma keeps it in a sub-config), else the model's."""
    hf = config.hf_config
    try:
        return hf.get_text_config(decoder=True)
    except (AttributeError, ValueError):
        return hf


def decoder_layers(config: ArchitectureConfig) -> int:
    hf = config.hf_config
    for source, name in (
        (hf, "decoder_layers"),
        (hf, "num_decoder_layers"),
        (_decoder_config(config), "decoder_layers"),
        (_decoder_config(config), "num_hidden_layers"),
    ):
        if isinstance(getattr(source, name, None), int):
            return getattr(source, name)
    raise ValueError(f"{config.model_type}: the config does not say how many decoder layers")


def cross_shape(config: ArchitectureConfig) -> tuple[int, int]:
    """(heads, head_dim) of the decoder's attention caches (key/value heads where they differ)."""
    hf, decoder = config.hf_config, _decoder_config(config)
    names = ("decoder_attention_heads", "num_heads", "num_key_value_heads", "num_attention_heads")
    heads = next(
        getattr(c, n) for c in (hf, decoder) for n in names if isinstance(getattr(c, n, None), int)
    )
    head_dim = next(
        (getattr(c, n) for c in (hf, decoder) for n in ("d_kv", "head_dim") if getattr(c, n, None)),
        None,
    )
    return heads, head_dim or _hidden_size(decoder) // heads


class _GraphTask(Task):
    """One graph of a seq2seq model, built by the parent's auto class. Attention is captured
    (``patterns/seq2seq_attention.py``); these implementations are the fallback. Eager first:
    where a query's keys are all masked (T5Gemma 2's bidirectional window over right padding)
    sdpa returns zeros and eager the mean of the values; eager is what the parity reference
    runs, and the two agree everywhere else."""

    attention_implementations = ("eager", "sdpa")

    def __init__(self, parent: Seq2SeqTask) -> None:
        self.parent = parent

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return self.parent.auto_class(config)

    def example_value(
        self, spec: TensorSpec, config: ArchitectureConfig, dtype: torch.dtype
    ) -> torch.Tensor:
        shape = [d if isinstance(d, int) else _SIZES[d] for d in spec.dims]
        return torch.zeros(shape, dtype=spec.dtype or dtype, device="meta")


def speech_features(config: Any) -> tuple[str, int, int | None]:
    """How a speech encoder takes ``input_features``: ``("channels_first", mel bins, frames)``
    (Whisper: ``[batch, mel, frames]``, a fixed window of ``2 * max_source_positions``), else
    ``("frames_first", features per frame, None)`` (``[batch, frames, features]``: Speech2Text's
    stacked channels, SeamlessM4T's projected features, Parakeet's mel bins)."""
    encoder = getattr(config, "encoder_config", None) or config
    if isinstance(getattr(config, "max_source_positions", None), int) and hasattr(
        config, "num_mel_bins"
    ):
        return "channels_first", config.num_mel_bins, 2 * config.max_source_positions
    if isinstance(getattr(config, "input_feat_per_channel", None), int):
        width = config.input_feat_per_channel * getattr(config, "input_channels", 1)
    elif isinstance(getattr(config, "feature_projection_input_dim", None), int):
        width = config.feature_projection_input_dim
    elif isinstance(getattr(encoder, "num_mel_bins", None), int):
        width = encoder.num_mel_bins
    else:
        raise ValueError(f"{config.model_type}: the config does not say the speech feature width")
    return "frames_first", width, None


def features_as_embeddings(model: torch.nn.Module) -> bool:
    """The model's forward takes ``input_features`` and hands them to an encoder that takes
    ``inputs_embeds`` (Pop2Piano: ``[batch, frames, d_model]`` features, padded by their
    ``attention_mask``); the encoder graph then calls the forward (``encode_through_forward``)."""
    forward = inspect.signature(model.forward).parameters
    encoder = inspect.signature(model.get_encoder().forward).parameters
    return (
        "input_features" in forward
        and "input_features" not in encoder
        and ("inputs_embeds" in encoder)
    )


def _encoder_inputs(config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
    """Token ids and mask; speech: features or samples in the layout the HF encoder takes;
    images: what the HF forward takes for them (``seq2seq_images.image_inputs``)."""
    from mobius.tasks.seq2seq_images import image_inputs

    params = inspect.signature(model.get_encoder().forward).parameters
    images = image_inputs(config, model)
    if images is not None:
        return images
    if "input_values" in params:  # raw audio (Moonshine)
        return [TensorSpec("input_values", None, (BATCH, AUDIO_SAMPLES))]
    if features_as_embeddings(model):  # Pop2Piano: the features are the encoder's embeddings
        width = _hidden_size(getattr(model.get_encoder(), "config", config.hf_config))
        return [
            TensorSpec("input_features", None, (BATCH, AUDIO_FRAMES, width)),
            TensorSpec("attention_mask", torch.int64, (BATCH, AUDIO_FRAMES)),
        ]
    if "input_features" not in params:
        return [
            TensorSpec("input_ids", torch.int64, (BATCH, ENCODER_SEQUENCE)),
            TensorSpec("attention_mask", torch.int64, (BATCH, ENCODER_SEQUENCE)),
        ]
    layout, width, frames = speech_features(config.hf_config)
    if layout == "channels_first":  # Whisper checks for its full window
        return [TensorSpec("input_features", None, (BATCH, width, frames))]
    return [TensorSpec("input_features", None, (BATCH, AUDIO_FRAMES, width))]


def _kv_dims(config: ArchitectureConfig, length: str) -> tuple[str | int, ...]:
    heads, head_dim = cross_shape(config)
    return (BATCH, heads, length, head_dim)


class EncoderGraph(_GraphTask):
    name = "encoder_model"

    def fallbacks_taken(self, config: ArchitectureConfig) -> list[Any]:
        """An image tower's graph may take one image size only (``seq2seq_images``)."""
        from mobius.tasks.seq2seq_images import fixed_size_fallbacks

        return fixed_size_fallbacks(config)

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return _encoder_inputs(config, model)

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        names = ["last_hidden_state"]
        for i in range(decoder_layers(config)):
            names += [f"present.{i}.encoder.key", f"present.{i}.encoder.value"]
        return names

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache
        from transformers.utils import ModelOutput

        from mobius.tasks.seq2seq_images import encode_through_forward, encoder_takes

        # with a padding mask, the lengths the keys may have: the mask's and each input's
        # sequence axis (axis 1: token ids, Pix2Struct's patches), which export may name apart
        mask = inputs.get("attention_mask")
        lengths = (
            None
            if mask is None
            else (mask.shape[-1], *(v.shape[1] for v in inputs.values() if v.dim() >= 2))
        )
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        if not encoder_takes(model, inputs):  # the image merged by the model's forward
            with masks_without_vmap():
                hidden = encode_through_forward(
                    model, inputs, GraphPhase("encoder", padded_lengths=lengths), cache
                )
            cross = cache.cross_attention_cache.layers
            return (hidden, *[t for layer in cross for t in (layer.keys, layer.values)])
        with phase(GraphPhase("encoder", padded_lengths=lengths)), masks_without_vmap():
            encoded = model.get_encoder()(**inputs, return_dict=True)
        hidden = encoded[0]  # some encoders return a tuple
        # one placeholder token: the decoder's cross-attention layers project ``hidden`` into the
        # cache; nothing else of this call reaches an output
        token = hidden.new_zeros((hidden.shape[0], 1), dtype=torch.long)
        if not isinstance(encoded, ModelOutput):
            encoded = _encoder_states(hidden)
        # the decoder may write into the states it is given (Moonshine Streaming adds its
        # position table in place): the graph's output stays the encoder's own
        encoded["last_hidden_state"] = hidden.clone()
        with phase(GraphPhase("placeholder")), masks_without_vmap():
            model(
                encoder_outputs=encoded,  # its own output type: Moonshine reads a compressed mask
                attention_mask=inputs.get("attention_mask"),
                decoder_input_ids=token,
                use_cache=True,
                return_dict=True,
                **{cache_argument(model): cache},
            )
        cross = cache.cross_attention_cache.layers
        return (hidden, *[t for layer in cross for t in (layer.keys, layer.values)])


# decoders that take one token per call once their cache holds any: the decoder graph is traced
# for one token and run once per new token by an ONNX Loop (``synth/token_loop.py``)
ONE_TOKEN_DECODERS = {
    "prophetnet": "its decoder takes one token per call once the cache holds any (it asserts so)",
    "xlm-prophetnet": "its decoder takes one token per call once the cache holds any (it asserts so)",
}


class DecoderGraph(_GraphTask):
    name = "decoder_model"
    padding_mask_input = "encoder_attention_mask"  # cross-attention's keys: the encoder's
    # why the graph is traced for one token and looped over the new ones (None: traced as is)
    loops_over_tokens: str | None = None

    def for_config(self, config: ArchitectureConfig) -> DecoderGraph:
        reason = ONE_TOKEN_DECODERS.get(config.model_type)
        if reason is None:
            return self
        looped = DecoderGraph(self.parent)
        looped.loops_over_tokens = reason
        return looped

    def looped_inputs(self, step_inputs: list[TensorSpec]) -> list[TensorSpec]:
        """The contract's inputs of a graph traced for one token (``loops_over_tokens``)."""
        return [
            TensorSpec(s.name, s.dtype, (BATCH, DECODER_SEQUENCE)) if s.name == "input_ids" else s
            for s in step_inputs
        ]

    def loop_invariant(self, inputs: list[TensorSpec]) -> set[str]:
        """Inputs every token's step reads unchanged: the encoder's keys, values and mask."""
        return {
            s.name for s in inputs if s.name == "encoder_attention_mask" or ".encoder." in s.name
        }

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        tokens = 1 if self.loops_over_tokens else DECODER_SEQUENCE
        specs = [TensorSpec("input_ids", torch.int64, (BATCH, tokens))]
        if any(s.name == "attention_mask" for s in _encoder_inputs(config, model)):
            # text encoders; speech ones read no mask here (CONTRACTS.md)
            specs.append(
                TensorSpec("encoder_attention_mask", torch.int64, (BATCH, ENCODER_SEQUENCE))
            )
        cross, past = _kv_dims(config, ENCODER_SEQUENCE), _kv_dims(config, PAST_DECODER)
        for i in range(decoder_layers(config)):
            specs += [
                TensorSpec(f"past_key_values.{i}.encoder.key", None, cross),
                TensorSpec(f"past_key_values.{i}.encoder.value", None, cross),
                TensorSpec(f"past_key_values.{i}.decoder.key", None, past),
                TensorSpec(f"past_key_values.{i}.decoder.value", None, past),
            ]
        return specs

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        names = ["logits"]
        for i in range(decoder_layers(config)):
            names += [f"present.{i}.decoder.key", f"present.{i}.decoder.value"]
        return names

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        layers = len([k for k in inputs if k.endswith(".decoder.key")])
        own, cross = DynamicCache(), DynamicCache()
        for i in range(layers):
            own.update(
                inputs[f"past_key_values.{i}.decoder.key"],
                inputs[f"past_key_values.{i}.decoder.value"],
                i,
            )
            cross.update(
                inputs[f"past_key_values.{i}.encoder.key"],
                inputs[f"past_key_values.{i}.encoder.value"],
                i,
            )
        cache = EncoderDecoderCache(own, cross)
        cache.is_updated = dict.fromkeys(range(layers), True)  # cross keys/values: reuse them
        key = inputs["past_key_values.0.encoder.key"]
        # the decoder reads only the encoder states' shape (masks) once the cross cache is full
        encoder_config = getattr(model.get_encoder(), "config", model.config)  # T5Gemma: own
        hidden = key.new_zeros((key.shape[0], key.shape[2], _hidden_size(encoder_config)))
        mask = inputs.get("encoder_attention_mask")
        current = GraphPhase(
            "decoder",
            padded_lengths=None if mask is None else (mask.shape[-1],),
            cross_lengths=tuple(
                inputs[f"past_key_values.{i}.encoder.key"].shape[2] for i in range(layers)
            ),
        )
        with phase(current), masks_without_vmap():
            out = model(
                encoder_outputs=_encoder_states(hidden, self._pooled(model, hidden)),
                attention_mask=mask,
                decoder_input_ids=inputs["input_ids"],
                use_cache=True,
                return_dict=True,
                **{cache_argument(model): cache},
            )
        held = cache.self_attention_cache.layers
        return (out.logits, *[t for layer in held for t in (layer.keys, layer.values)])

    def _pooled(self, model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor | None:
        """An image model's encoder states as its decoder may read them instead (PP-FormulaNet
        cross-attends to the encoder's projected ``pooler_output``): only their shape is read."""
        if self.parent.name != "image-text-to-text":
            return None
        width = _hidden_size(model.config.get_text_config(decoder=True))
        return hidden.new_zeros((*hidden.shape[:2], width))


@functools.cache
def _encoder_states_type() -> type:
    """Made on first use, so that importing the tasks does not import transformers."""
    from dataclasses import dataclass

    from transformers.modeling_outputs import BaseModelOutput

    @dataclass
    class EncoderStates(BaseModelOutput):
        """The encoder's output as the decoder reads it; fields other models' encoders add
        (router logits, a compressed mask) are None. ``pooler_output``: the states an image
        model's decoder reads in place of the last hidden state (PP-FormulaNet), else None."""

        pooler_output: torch.Tensor | None = None

        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            return None

    return EncoderStates


def _encoder_states(hidden: torch.Tensor, pooled: torch.Tensor | None = None) -> Any:
    return _encoder_states_type()(last_hidden_state=hidden, pooler_output=pooled)


def _hidden_size(hf: Any) -> int:
    """The width of the encoder states (T5Gemma 2's encoder config keeps it in its text config)."""
    if getattr(hf, "d_model", None) is None and getattr(hf, "hidden_size", None) is None:
        hf = hf.get_text_config()
    return getattr(hf, "d_model", None) or hf.hidden_size


class Seq2SeqTask(Task):
    """Text-to-text (T5, BART, Marian, ...) or speech-to-text (Whisper): two graphs."""

    captures_attention = True

    def __init__(self, name: str, mapping: str) -> None:
        self.name = name
        self.mapping = mapping
        self.graphs: list[Task] = [EncoderGraph(self), DecoderGraph(self)]

    def supports(self, config: ArchitectureConfig) -> bool:
        from mobius.tasks.head import auto_mapping

        return config.is_encoder_decoder and type(config.hf_config) in auto_mapping(self.mapping)

    def refusal(self, config: ArchitectureConfig) -> str | None:
        """Why this model cannot meet the contract, before any trace; None if it may. A decoder
        whose every step reads several codebook ids (``num_channels`` in its config, Dia's 9)
        is a text-to-speech model: its ``input_ids`` are ``[batch, steps, channels]``, its logits
        one row per channel, and its generation its own delay-pattern loop."""
        channels = getattr(_decoder_config(config), "num_channels", None)
        if self.name == "image-text-to-text":  # num_channels: the image's (UDOP's one config)
            channels = None
        if isinstance(channels, int) and channels > 1:
            return (
                f"{config.model_type} is a text-to-speech model: its decoder reads {channels} "
                "audio codebook ids per step ([batch, steps, channels]) and generates them in "
                "its own delay-pattern loop, which the text2text-generation contract (one token "
                "per step) does not describe"
            )
        return None

    def auto_class(self, config: ArchitectureConfig) -> Any:
        from transformers import (
            AutoModelForImageTextToText,
            AutoModelForSeq2SeqLM,
            AutoModelForSpeechSeq2Seq,
        )

        if self.name == "automatic-speech-recognition":
            return AutoModelForSpeechSeq2Seq
        if self.name == "image-text-to-text":
            return AutoModelForImageTextToText
        return AutoModelForSeq2SeqLM

    def manifest(self, config: ArchitectureConfig) -> dict[str, Any]:
        """What mobius.json says beyond the graphs: how generation starts."""
        hf = config.hf_config
        start = eos = None
        for source in (hf, _decoder_config(config)):  # an image model's: in its text config
            start = getattr(source, "decoder_start_token_id", None)
            if start is None:
                start = getattr(source, "pad_token_id", None)
            eos = getattr(source, "eos_token_id", None)
            if start is not None:
                break
        manifest = {"decoder_start_token_id": start, "eos_token_id": eos}
        if self.name == "image-text-to-text":  # not the three-graph split (CONTRACTS.md)
            manifest["layout"] = "encoder-decoder"
        return manifest


TEXT2TEXT = Seq2SeqTask("text2text-generation", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM")
SPEECH2TEXT = Seq2SeqTask("automatic-speech-recognition", "MODEL_FOR_SPEECH_SEQ_2_SEQ")
# image-text-to-text models that are encoder-decoders: the image goes into the encoder graph
IMAGE2TEXT = Seq2SeqTask("image-text-to-text", "MODEL_FOR_IMAGE_TEXT_TO_TEXT")
