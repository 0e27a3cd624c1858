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

from typing import Any

import torch

from mobius.errors import UnsupportedError
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.audio_inputs import (
    AUDIO_CHUNKS,
    AUDIO_CLIPS,
    AUDIO_ROWS,
    FRAMES,
    MASKS,
    PROMPTS,
    ROW_MASK,
    SAMPLES,
    audio_config,
    audio_inputs,
    features_method,
    masks_rows,
    model_class,
)
from mobius.tasks.base import BATCH, SEQUENCE, Task, TensorSpec
from mobius.tasks.modality import Modality, place_features, scatter_features
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
# example sizes: distinct from the base task's (2, 7, 4, 11) and each other (the image rows too:
# the embedding graph of a model with both takes both)
_SIZES = {
    AUDIO_TOKENS: 6,
    FRAMES: 200,
    SAMPLES: 3200,
    PROMPTS: 3,
    AUDIO_ROWS: 9,
    IMAGE_TOKENS: 8,
    AUDIO_CHUNKS: 10,
    AUDIO_CLIPS: 12,
}


def is_audio_llm(config: ArchitectureConfig) -> bool:
    """A decoder-only model with an audio tower that feeds its LM through embeddings."""
    hf = config.hf_config
    if config.is_encoder_decoder or audio_config(hf) is None:
        return False
    return model_class(hf) is not None


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
        out = features_method(model)(**inputs, return_dict=True)
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
