"""The audio encoder's inputs (``audio_llm.AudioEncoderGraph``): the speech LLM's features
method's arguments under their HF names, each with the layout its processor gives."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from mobius.errors import UnsupportedError
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec
from mobius.tasks.phi4_multimodal import MODE

FRAMES = "num_frames"
SAMPLES = "num_samples"
PROMPTS = "prompt_batch"  # MusicFlamingo's tower reads the prompts beside its clips
AUDIO_ROWS = "num_audio_rows"  # Granite Speech's mask of the projector's rows per clip
# MOSS Transcribe: the processor cuts each clip into windows of audio_chunk_size samples, one row
# of features per window (audio_chunks), and gives one raw-sample mask row per clip (audio_clips)
AUDIO_CHUNKS = "audio_chunks"
AUDIO_CLIPS = "audio_clips"
SAMPLE_MASK = "padding_mask"
# mask names the processors give beside input_features
MASKS = (
    "input_features_mask",
    "feature_attention_mask",
    "attention_mask",
    "padding_mask",
    "audio_attention_mask",
)
# the log-mel features under the processors' names (Phi-4-multimodal's: audio_input_features)
FEATURES = ("input_features", "audio_input_features")
# one count per clip: Phi-4-multimodal's audio tokens, dots.ocr-3's waveform samples per chunk
PER_CLIP = ("audio_embed_sizes", "chunk_sample_lengths")
ROW_MASK = "input_features_mask"


# the mappings transformers lists decoder-only speech LLMs in (none holds all of them)
MAPPINGS = ("SPEECH_SEQ_2_SEQ", "MULTIMODAL_LM", "SEQ_TO_SEQ_CAUSAL_LM", "CAUSAL_LM")


def model_class(hf: Any) -> type | None:
    """The speech LLM's ``...ForConditionalGeneration``: the class one of ``MAPPINGS`` gives."""
    from transformers.models.auto import modeling_auto

    for name in MAPPINGS:
        mapping = getattr(modeling_auto, f"MODEL_FOR_{name}_MAPPING")
        if type(hf) in mapping:
            cls = mapping[type(hf)]
            if features_method(cls) is not None:
                return cls
    return None


def features_method(owner: Any) -> Any:
    """``get_audio_features`` (on the head or the base model under it; ``audio_qwen2`` for a
    model with none), else None."""
    from mobius.tasks.audio_qwen2 import OWN_FEATURES

    cls = owner if isinstance(owner, type) else type(owner)
    if cls.__name__ in OWN_FEATURES:
        own = OWN_FEATURES[cls.__name__]
        return own if isinstance(owner, type) else own.__get__(owner)
    method = getattr(owner, "get_audio_features", None)
    if method is None and isinstance(owner, torch.nn.Module):
        method = getattr(getattr(owner, "model", None), "get_audio_features", None)
    return method


def audio_config(hf: Any) -> Any:
    """The audio tower's config: ``audio_config`` (Granite Speech: ``encoder_config``)."""
    for name in ("audio_config", "encoder_config"):
        sub = getattr(hf, name, None)
        if sub is not None:
            return sub
    return None


def audio_inputs(config: ArchitectureConfig) -> list[TensorSpec]:
    """The features method's required arguments under their HF names: ``input_features``
    ``[batch, mel, frames]`` (``[batch, frames, width]`` for towers configured by ``input_dim``;
    frames fixed at ``2 * max_source_positions`` for Whisper-style towers, which check it), its
    mask ``[batch, frames]``, and ``input_ids`` where the tower reads the prompt (MusicFlamingo).
    Where the processor cuts clips into windows (``chunked``), the features and their mask have
    one row per window (``audio_chunks``) and ``padding_mask`` one row of raw samples per clip
    (``[audio_clips, num_samples]``)."""
    hf = config.hf_config
    audio = audio_config(hf)
    params = _signature(hf)
    rows = AUDIO_CHUNKS if chunked(hf) else BATCH
    frames: str | int = FRAMES
    if isinstance(getattr(audio, "max_source_positions", None), int):
        frames = 2 * audio.max_source_positions
    _check_known(hf, params)  # before any input is shaped: the unknown argument is the reason
    specs = []
    for name, p in params.items():
        if name == "self" or p.kind in _VARIADIC:
            continue
        if name in FEATURES:
            dims = (rows, *_feature_dims(audio, frames)[1:])
            specs.append(TensorSpec(name, None, dims, multiple_of=_frame_multiple(audio)))
        elif name == SAMPLE_MASK and chunked(hf):
            specs.append(TensorSpec(name, torch.int64, (AUDIO_CLIPS, SAMPLES)))
        elif name == "input_values":  # raw waveform (OmniASR): [batch, 1, samples]
            frames = SAMPLES
            specs.append(TensorSpec(name, None, (BATCH, 1, SAMPLES)))
        elif name in MASKS:
            unit = specs[0].multiple_of if specs else 1
            specs.append(TensorSpec(name, torch.int64, (rows, frames), multiple_of=unit))
        elif name == "input_ids":  # the prompts, one per row: not one per clip (or window)
            specs.append(TensorSpec(name, torch.int64, (PROMPTS, SEQUENCE)))
        elif name in PER_CLIP:
            specs.append(TensorSpec(name, torch.int64, (BATCH,)))
        elif name == MODE:  # 1 where the call has images too (phi4_multimodal)
            specs.append(TensorSpec(name, torch.int64, (1,)))
    if not any(s.name in (*FEATURES, "input_values") for s in specs):  # (*args, **kwargs)
        specs = [TensorSpec("input_features", None, _feature_dims(audio, frames))]
    if masks_rows(hf):
        specs.append(TensorSpec(ROW_MASK, torch.int64, (BATCH, AUDIO_ROWS)))
    return specs


_KNOWN = (*FEATURES, "input_values", "input_ids", *PER_CLIP, MODE, *MASKS)


def _check_known(hf: Any, params: dict[str, inspect.Parameter]) -> None:
    """Refuses a features method with a required argument the audio graph has no input for,
    naming it."""
    for name, p in params.items():
        if name == "self" or p.kind in _VARIADIC or name in _KNOWN:
            continue
        if p.default is inspect.Parameter.empty:
            raise UnsupportedError(
                f"{hf.model_type}: the audio features method takes '{name}', which the audio "
                "graph has no contract for"
            )


def chunked(hf: Any) -> bool:
    """The processor cuts each clip into windows of ``audio_chunk_size`` raw samples, one row of
    ``input_features`` each, and marks each clip's samples in ``padding_mask`` (MOSS
    Transcribe): the features method's rows are windows, in clip order, so its output rows are
    every clip's in batch order as for any other model."""
    return isinstance(getattr(hf, "audio_chunk_size", None), int)


def masks_rows(hf: Any) -> bool:
    """The forward keeps only the features method's output rows that ``input_features_mask``
    marks (Granite Speech: the processor's ``[batch, rows]`` mask of each clip's projector rows),
    a mask the features method itself does not take."""
    cls = model_class(hf)
    forward = inspect.signature(cls.forward).parameters if cls is not None else {}
    return ROW_MASK in forward and ROW_MASK not in _signature(hf)


def _frame_multiple(audio: Any) -> int:
    """What the frame count must be a multiple of: towers that cut the frames into chunks of
    ``2 * n_window`` (Qwen3-ASR); FastConformer towers under an ``asr_config`` that stack
    ``subsampling_factor`` frames and refuse any other count (Nemotron 3.5 Transcribe)."""
    if isinstance(getattr(audio, "n_window", None), int):
        return 2 * audio.n_window
    if getattr(audio, "asr_config", None) is not None:
        return audio.subsampling_factor
    return 1


def _mel_first(audio: Any) -> bool:
    """``input_features`` is ``[batch, mel, frames]`` (Whisper-style towers, by
    ``num_mel_bins``; dots.ocr-3's by ``feature_size``), not ``[batch, frames, width]``
    (``_frame_width``; FastConformer towers under an ``asr_config``: Nemotron 3.5 Transcribe)."""
    has_width = any(isinstance(getattr(audio, n, None), int) for n in _WIDTHS)
    has_width = has_width or getattr(audio, "asr_config", None) is not None
    return _mel_bins(audio) is not None and not has_width


def _mel_bins(audio: Any) -> int | None:
    for name in ("num_mel_bins", "feature_size"):
        if isinstance(getattr(audio, name, None), int):
            return getattr(audio, name)
    return None


_WIDTHS = ("input_dim", "num_stacked_frames", "input_size")


def _feature_dims(audio: Any, frames: str | int) -> tuple:
    if _mel_first(audio):
        return (BATCH, _mel_bins(audio), frames)
    return (BATCH, frames, _frame_width(audio))


def _frame_width(audio: Any) -> int:
    """A frame's width where the features are ``[batch, frames, width]``: Granite Speech's
    ``input_dim``; Phi-4-multimodal's conformer's ``input_size``; Fun-ASR-Nano's
    ``num_mel_bins * num_stacked_frames`` (low-frame-rate stacking)."""
    for name in ("input_dim", "input_size"):
        if isinstance(getattr(audio, name, None), int):
            return getattr(audio, name)
    if getattr(audio, "asr_config", None) is not None:
        return audio.asr_config.num_mel_bins
    return audio.num_mel_bins * audio.num_stacked_frames


def _signature(hf: Any) -> dict[str, inspect.Parameter]:
    """The features method's parameters: the head's, or where it only forwards ``*args,
    **kwargs`` (Voxtral, Granite Speech), the base model's under it; where the head names some
    and forwards the rest, the base model's required ones it does not name come after them
    (MOSS Transcribe's ``padding_mask``)."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    params = dict(inspect.signature(features_method(model_class(hf))).parameters)
    named = [p for n, p in params.items() if n != "self" and p.kind not in _VARIADIC]
    if type(hf) not in MODEL_MAPPING:
        return params
    base = getattr(MODEL_MAPPING[type(hf)], "get_audio_features", None)
    if base is None:
        return params
    if not named:
        return dict(inspect.signature(base).parameters)
    for name, p in inspect.signature(base).parameters.items():
        required = p.kind not in _VARIADIC and p.default is inspect.Parameter.empty
        if required and name not in params and name != "self":
            params[name] = p
    return params


_VARIADIC = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
