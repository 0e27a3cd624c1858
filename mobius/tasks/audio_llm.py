"""Speech and audio LLMs (automatic-speech-recognition, audio-text-to-text): three graphs, four
for models that also take images (CONTRACTS.md, "Speech and audio LLMs").

The audio instance of the modality-encoder → embedding → decoder split (``modality.py``):

- ``audio_encoder``: the model's ``get_audio_features`` (the audio tower and the projector) on the
  processor's audio inputs under their HF names, flattened to ``audio_features``
  ``[num_audio_tokens, hidden]``: every clip's rows in batch order, as the HF forward scatters them.
- ``vision_encoder`` (models with a vision tower too: Qwen-Omni thinkers): ``vlm.VisionGraph``.
- ``embedding``: ``get_input_embeddings()`` on ``input_ids`` with each modality's rows placed at
  its own placeholder token (``modality.place_features``; the image side is ``vlm.EmbeddingGraph``).
- ``decoder_model``: ``vlm.DecoderGraph`` on this model: the whole model called with
  ``inputs_embeds`` and no audio, under the causal-LM cache contract.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from mobius.errors import UnsupportedError
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, Task, TensorSpec
from mobius.tasks.modality import Modality, place_features, scatter_features
from mobius.tasks.phi4_multimodal import MODE
from mobius.tasks.vlm import (
    IMAGE,
    IMAGE_TOKENS,
    DecoderGraph,
    EmbeddingGraph,
    VisionGraph,
    VisionLanguageTask,
    _features,
    _whole_when_iterated,
    supports_image_text,
    text_config,
    text_config_of,
)
from mobius.tasks.vlm_inputs import own_image_features

ASR = "automatic-speech-recognition"
AUDIO_TEXT = "audio-text-to-text"
AUDIO_TOKENS = "num_audio_tokens"
FRAMES = "num_frames"
SAMPLES = "num_samples"
PROMPTS = "prompt_batch"  # MusicFlamingo's tower reads the prompts beside its clips
AUDIO_ROWS = "num_audio_rows"  # Granite Speech's mask of the projector's rows per clip
# the mappings transformers lists decoder-only speech LLMs in (none holds all of them)
MAPPINGS = ("SPEECH_SEQ_2_SEQ", "MULTIMODAL_LM", "SEQ_TO_SEQ_CAUSAL_LM", "CAUSAL_LM")
# example sizes: distinct from the base task's (2, 7, 4, 11) and each other (the image rows too:
# the embedding graph of a model with both takes both)
_SIZES = {AUDIO_TOKENS: 6, FRAMES: 200, SAMPLES: 3200, PROMPTS: 3, AUDIO_ROWS: 9, IMAGE_TOKENS: 8}
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


def model_class(hf: Any) -> type | None:
    """The speech LLM's ``...ForConditionalGeneration``: the class one of ``MAPPINGS`` gives."""
    from transformers.models.auto import modeling_auto

    for name in MAPPINGS:
        mapping = getattr(modeling_auto, f"MODEL_FOR_{name}_MAPPING")
        if type(hf) in mapping:
            cls = mapping[type(hf)]
            if _features_method(cls) is not None:
                return cls
    return None


def _features_method(owner: Any) -> Any:
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


def is_audio_llm(config: ArchitectureConfig) -> bool:
    """A decoder-only model with an audio tower that feeds its LM through embeddings."""
    hf = config.hf_config
    if config.is_encoder_decoder or audio_config(hf) is None:
        return False
    return model_class(hf) is not None


def audio_config(hf: Any) -> Any:
    """The audio tower's config: ``audio_config`` (Granite Speech: ``encoder_config``)."""
    for name in ("audio_config", "encoder_config"):
        sub = getattr(hf, name, None)
        if sub is not None:
            return sub
    return None


def in_speech_mapping(hf: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING

    return type(hf) in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING


def audio_token_id(hf: Any) -> int | None:
    """The audio placeholder token (on the audio sub-config where the config names none:
    Phi-4-multimodal)."""
    for owner in (hf, audio_config(hf)):
        for name in ("audio_token_id", "audio_token_index"):
            value = getattr(owner, name, None)
            if isinstance(value, int):
                return value
    return None


AUDIO = Modality("audio", "audio_encoder", "audio_features", AUDIO_TOKENS, audio_token_id)


def modalities(config: ArchitectureConfig) -> tuple[Modality, ...]:
    """The encoders a speech LLM's package has: audio, and images before it where the config
    has a vision tower too (``vision_config``: Qwen-Omni thinkers). Never the audio alone for such
    a model: one whose image path mobius cannot split out is refused."""
    hf = config.hf_config
    if getattr(hf, "vision_config", None) is None:
        return (AUDIO,)
    if not supports_image_text(config) and own_image_features(model_class(hf)) is None:
        raise UnsupportedError(
            f"'{hf.model_type}' has a vision tower (vision_config) beside its audio tower, and no "
            "image features method mobius splits out: converting the audio alone would drop its "
            "images; --features text-only converts its text decoder alone"
        )
    return (IMAGE, AUDIO)


def unsplit_audio_and_images(config: ArchitectureConfig) -> str | None:
    """Why a decoder with both an audio and a vision tower (``audio_config``, ``vision_config``)
    is not converted with its encoders: its model has no audio features method to split out,
    nor one mobius writes for it (``audio_qwen2.OWN_FEATURES``). None for any other model.
    Detection refuses such a model rather than writing its text decoder alone."""
    hf = config.hf_config
    if config.is_encoder_decoder or is_audio_llm(config):
        return None
    if audio_config(hf) is None or getattr(hf, "vision_config", None) is None:
        return None
    return (
        f"'{hf.model_type}' takes images and audio (vision_config, audio_config), but its model "
        "has no audio features method (get_audio_features) mobius splits out of the forward; "
        "--task text-generation converts its text decoder alone, without either"
    )


class _Auto:
    """What ``auto_class`` returns: builds the speech LLM's class (``model_class``)."""

    @staticmethod
    def _cls(config: Any) -> type:
        cls = model_class(config)
        if cls is None:
            raise UnsupportedError(f"{config.model_type} is no speech LLM mobius knows")
        return cls

    @classmethod
    def from_config(cls, config: Any, **kwargs: Any) -> torch.nn.Module:
        # the experts implementation reaches a mixture-of-experts decoder (Nemotron 3.5
        # Transcribe's Nemotron-H) as it does a text model's
        return cls._cls(config)._from_config(config, **kwargs)

    @classmethod
    def from_pretrained(cls, directory: Any, **kwargs: Any) -> torch.nn.Module:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(directory)
        return cls._cls(config).from_pretrained(directory, **kwargs)


def audio_inputs(config: ArchitectureConfig) -> list[TensorSpec]:
    """The features method's required arguments under their HF names: ``input_features``
    ``[batch, mel, frames]`` (``[batch, frames, width]`` for towers configured by ``input_dim``;
    frames fixed at ``2 * max_source_positions`` for Whisper-style towers, which check it), its
    mask ``[batch, frames]``, and ``input_ids`` where the tower reads the prompt (MusicFlamingo)."""
    hf = config.hf_config
    audio = audio_config(hf)
    params = _signature(hf)
    frames: str | int = FRAMES
    if isinstance(getattr(audio, "max_source_positions", None), int):
        frames = 2 * audio.max_source_positions
    _check_known(hf, params)  # before any input is shaped: the unknown argument is the reason
    specs = []
    for name, p in params.items():
        if name == "self" or p.kind in _VARIADIC:
            continue
        if name in FEATURES:
            dims = _feature_dims(audio, frames)
            specs.append(TensorSpec(name, None, dims, multiple_of=_frame_multiple(audio)))
        elif name == "input_values":  # raw waveform (OmniASR): [batch, 1, samples]
            frames = SAMPLES
            specs.append(TensorSpec(name, None, (BATCH, 1, SAMPLES)))
        elif name in MASKS:
            unit = specs[0].multiple_of if specs else 1
            specs.append(TensorSpec(name, torch.int64, (BATCH, frames), multiple_of=unit))
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
    **kwargs`` (Voxtral, Granite Speech), the base model's under it."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    params = inspect.signature(_features_method(model_class(hf))).parameters
    named = [p for n, p in params.items() if n != "self" and p.kind not in _VARIADIC]
    if not named and type(hf) in MODEL_MAPPING:
        params = inspect.signature(MODEL_MAPPING[type(hf)].get_audio_features).parameters
    return dict(params)


_VARIADIC = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)


class _AudioGraph(Task):
    attention_implementations = ("sdpa", "eager")
    padding_mask_input = None

    def __init__(self, parent: AudioLanguageTask) -> None:
        self.parent = parent

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return _Auto

    def example_value(
        self, spec: TensorSpec, config: ArchitectureConfig, dtype: torch.dtype
    ) -> torch.Tensor:
        sizes = {BATCH: 2, SEQUENCE: 7, **_SIZES}
        shape = [d if isinstance(d, int) else sizes.get(d, 5) for d in spec.dims]
        if spec.dtype == torch.int64 and spec.name in MASKS:
            return torch.ones(shape, dtype=torch.int64, device="meta")
        return torch.zeros(shape, dtype=spec.dtype or dtype, device="meta")


class AudioEncoderGraph(_AudioGraph):
    name = "audio_encoder"

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return audio_inputs(config)

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return ["audio_features"]

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        return (audio_features(model, inputs),)


def audio_features(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """``get_audio_features`` as ``[num_audio_tokens, hidden]``: every clip's rows in order
    (where the forward masks them, ``masks_rows``, the rows the mask keeps)."""
    row_mask = inputs.get(ROW_MASK) if masks_rows(model.config) else None
    inputs = {k: v for k, v in inputs.items() if row_mask is None or k != ROW_MASK}
    with _whole_when_iterated():
        out = _features_method(model)(**inputs, return_dict=True)
    if row_mask is not None:  # HF's features[mask]: the mask marks each clip's first rows
        rows = out.pooler_output
        kept = torch.arange(rows.shape[1], device=rows.device)[None, :] < row_mask.sum(-1)[:, None]
        return rows[kept]
    return _features(out)


class AudioEmbeddingGraph(_AudioGraph):
    """``input_ids`` and the audio rows (and, for a model with images too, the image side's
    inputs: ``vlm.EmbeddingGraph``'s) → ``inputs_embeds``, each modality's rows at its own token."""

    name = "embedding"

    def _image_side(self) -> EmbeddingGraph | None:
        return EmbeddingGraph(self.parent) if IMAGE in self.parent.modalities else None

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        hidden = text_config(config).hidden_size
        images = self._image_side()
        first = (
            images.inputs(config, model)
            if images
            else [TensorSpec("input_ids", torch.int64, (BATCH, SEQUENCE))]
        )
        return [*first, TensorSpec(AUDIO.features, None, (AUDIO_TOKENS, hidden))]

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        images = self._image_side()
        return images.outputs(config) if images else ["inputs_embeds"]

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        token = audio_token_id(model.config)
        if token is None:
            raise UnsupportedError(
                f"{model.config.model_type}: the config names no audio token (audio_token_id), "
                "so the embedding graph cannot place the audio features"
            )
        ids, audio = inputs["input_ids"], inputs[AUDIO.features]
        images = self._image_side()
        if images is None:
            return (scatter_features(model.get_input_embeddings(), ids, audio, token),)
        out = images.call(model, {k: v for k, v in inputs.items() if k != AUDIO.features})
        return (place_features(out[0], ids, audio, token), *out[1:])


class AudioVisionGraph(VisionGraph):
    """``vlm.VisionGraph`` built as the speech LLM's class (Phi-4-multimodal has no
    image-text-to-text class; the Omni thinkers' is the same class)."""

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return _Auto


class AudioDecoderGraph(DecoderGraph):
    """``vlm.DecoderGraph`` built as the speech LLM's class."""

    def supports(self, config: ArchitectureConfig) -> bool:
        return is_audio_llm(config)

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return _Auto

    def for_config(self, config: ArchitectureConfig) -> AudioDecoderGraph:
        return self


class AudioLanguageTask(VisionLanguageTask):
    """One encoder per modality (``vision_encoder`` where the model takes images too, then
    ``audio_encoder``), ``embedding`` and ``decoder_model``; ``name`` is the pipeline name
    (speech-to-text for the speech mapping's models, audio-text-to-text for the others)."""

    alternative = "to convert its text decoder alone, pass --features text-only"

    def __init__(
        self, name: str, text_only: bool = False, modalities: tuple[Modality, ...] = (AUDIO,)
    ) -> None:
        self.name = name
        self.text_only = text_only
        self.modalities = modalities
        if text_only:
            self.graphs: list[Task] = [AudioDecoderGraph(self, text_only=True)]
        else:
            encoders = {IMAGE: AudioVisionGraph, AUDIO: AudioEncoderGraph}
            self.graphs = [
                *(encoders[m](self) for m in modalities),
                AudioEmbeddingGraph(self),
                AudioDecoderGraph(self),
            ]

    def supports(self, config: ArchitectureConfig) -> bool:
        return is_audio_llm(config)

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return _Auto

    @property
    def text_only_task(self) -> AudioLanguageTask:
        return AudioLanguageTask(self.name, text_only=True, modalities=self.modalities)

    def manifest(self, config: ArchitectureConfig) -> dict[str, Any]:
        """The layout, the modalities in encoder order, each placeholder token and the position
        scheme (for a model with images, the image task's: ``VisionLanguageTask.manifest``)."""
        hf = config.hf_config
        if self.text_only:
            return {"layout": "text-only", "eos_token_id": text_config_of(hf).eos_token_id}
        if IMAGE in self.modalities:
            manifest = super().manifest(config)
        else:
            eos = getattr(text_config_of(hf), "eos_token_id", None)
            manifest = {"position_ids": "sequence", "eos_token_id": eos}
        modalities = [m.name for m in self.modalities]
        return {
            "layout": "audio-llm",
            **manifest,
            "modalities": modalities,
            "audio_token_id": audio_token_id(hf),
        }

    def runtime_files(
        self, models: dict[str, Any], config: ArchitectureConfig, checkpoint_dir: Any
    ) -> tuple[dict[str, str], str | None]:
        """onnxruntime-genai 0.18 runs audio only through its whisper and phi4mm pipelines,
        neither of which loads this layout; a text-only build gets the decoder's config."""
        from mobius.runtime.genai_vlm import vlm_genai_files

        if set(models) == {"decoder_model"}:
            return vlm_genai_files(models, config.hf_config, checkpoint_dir, None)
        return {}, (
            "onnxruntime-genai has no pipeline for the audio-llm layout (its audio models are "
            "whisper's encoder-decoder and phi4mm's speech adapter)"
        )


def audio_task(config: ArchitectureConfig, name: str | None = None) -> AudioLanguageTask:
    """The task for a speech LLM: ``name`` where given, else speech-to-text for the speech
    mapping's models and audio-text-to-text for the others."""
    if name is None:
        name = ASR if in_speech_mapping(config.hf_config) else AUDIO_TEXT
    return AudioLanguageTask(name, modalities=modalities(config))
