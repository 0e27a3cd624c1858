"""Picks the task for a config: the one ``--task`` names, or the head ``architectures`` names."""

from __future__ import annotations

import logging

from mobius.errors import ConfigError, UnsupportedError
from mobius.sources import remote_code
from mobius.sources.config import ArchitectureConfig
from mobius.tasks import ALIASES, SEQ2SEQ_TASKS, TASKS, Task
from mobius.tasks.audio_llm import (
    ASR,
    AUDIO_TEXT,
    audio_task,
    in_speech_mapping,
    is_audio_llm,
    unsplit_audio_and_images,
)
from mobius.tasks.head import AUDIO, VISION, HeadTask, class_names

_DECODER_ARCH_SUFFIXES = ("ForCausalLM", "LMHeadModel")
log = logging.getLogger("mobius")


def supported_tasks(config: ArchitectureConfig) -> list[str]:
    """The tasks transformers' auto mappings have a model class for, for this config's class."""
    return [name for name, task in TASKS.items() if task.supports(config)]


def task_from_architectures(config: ArchitectureConfig) -> Task | None:
    """The task whose auto mapping lists a class of the config's ``architectures`` (the head the
    checkpoint was saved with: ``BertForMaskedLM`` is fill-mask), or None."""
    # a bare model class in a head's mapping too (CLIPModel) is that head: try feature extraction last
    ordered = sorted(TASKS.values(), key=lambda t: t.name == "feature-extraction")
    for arch in config.architectures:
        for task in ordered:
            names = class_names(task.mapping, config.model_type)
            names += remote_code.class_names(config.hf_config, task.mapping)
            if arch in names and task.supports(config):
                return task
    return None


def saved_head(config: ArchitectureConfig, task: Task) -> str | None:
    """Which other head the checkpoint was saved with, when ``architectures`` names one: why its
    weights may not fit ``task`` (a ``BertModel`` checkpoint has no fill-mask head)."""
    named = task_from_architectures(config)
    if named is None or named is task:
        return None
    return (
        f"the checkpoint was saved as {', '.join(config.architectures)} ({named.name}), "
        f"not for {task.name}"
    )


def detect_task(config: ArchitectureConfig) -> Task:
    """The head named by ``architectures``; else text generation for decoder models and feature
    extraction for encoders."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING

    model_type = config.model_type
    if config.is_encoder_decoder:
        return seq2seq_task(config)
    if is_audio_llm(config):  # before text generation, whose mapping lists some speech LLMs too
        return audio_task(config)
    if in_speech_mapping(config.hf_config):  # a decoder-only speech model of another form
        raise UnsupportedError(
            f"'{model_type}' is a speech-to-text model whose audio path mobius does not convert "
            "(no audio tower config with an audio features method feeding the embeddings); "
            "--task text-generation converts its text decoder alone, without audio"
        )
    unsplit = unsplit_audio_and_images(config)
    if unsplit:  # neither encoder can be split out: never a silent text-only graph
        raise UnsupportedError(unsplit)
    vlm = TASKS["image-text-to-text"]
    if any(a in class_names(vlm.mapping, model_type) for a in config.architectures):
        if vlm.supports(config):  # before text generation, whose mapping lists some VLMs too
            return vlm
    named = task_from_architectures(config)
    if named is not None:
        return named
    generation, features = TASKS["text-generation"], TASKS["feature-extraction"]
    if generation.supports(config):
        named_decoder = any(a.endswith(_DECODER_ARCH_SUFFIXES) for a in config.architectures)
        is_decoder = bool(getattr(config.hf_config, "is_decoder", False))
        masked = type(config.hf_config) in MODEL_FOR_MASKED_LM_MAPPING
        if not masked or named_decoder or is_decoder or not features.supports(config):
            return generation
    if features.supports(config):
        return features
    raise ConfigError(
        f"no task known for model_type '{model_type}'; pass --task ({', '.join(TASKS)})"
    )


def seq2seq_task(config: ArchitectureConfig) -> Task:
    """Speech-to-text, text-to-text or image-text-to-text, by the auto mapping that builds the
    model (a model in several, T5Gemma 2, is text-to-text unless ``--task`` says otherwise)."""
    for name in ("automatic-speech-recognition", "text2text-generation", "image-text-to-text"):
        if SEQ2SEQ_TASKS[name].supports(config):
            return SEQ2SEQ_TASKS[name]
    raise ConfigError(
        f"'{config.model_type}' is an encoder-decoder model that neither AutoModelForSeq2SeqLM, "
        "AutoModelForSpeechSeq2Seq nor AutoModelForImageTextToText builds; mobius does not "
        "convert it"
    )


def get_task(name: str | None, config: ArchitectureConfig) -> Task:
    """The task ``name`` (or an alias of one), checked against the model; detected when None."""
    if name is None:
        return detect_task(config)
    canonical = ALIASES.get(name, name)
    if is_audio_llm(config):
        return _speech_llm_task(canonical, config)
    if canonical not in TASKS:
        choices = ", ".join([*TASKS, *ALIASES])
        raise ConfigError(f"unknown task '{name}'; choose one of: {choices}")
    if config.is_encoder_decoder and canonical in SEQ2SEQ_TASKS:
        if SEQ2SEQ_TASKS[canonical].supports(config):
            return SEQ2SEQ_TASKS[canonical]
        detected = seq2seq_task(config)
        if detected.name != canonical:
            raise ConfigError(
                f"'{config.model_type}' is a {detected.name} model, not {canonical}; "
                f"use --task {detected.name}"
            )
        return detected
    task = TASKS[canonical]
    if isinstance(task, HeadTask) and config.is_encoder_decoder:
        task = task.on_encoder_decoder()
    if not task.supports(config):
        from mobius.tasks.vlm_unsplit import why_not_split

        unsplit = why_not_split(config) if canonical == "image-text-to-text" else None
        if unsplit:
            text = "text-generation" in supported_tasks(config)
            way = "; --task text-generation converts its text decoder" if text else ""
            raise ConfigError(unsplit + way)
        has = ", ".join(supported_tasks(config)) or "none"
        raise ConfigError(
            f"'{config.model_type}' has no {canonical} head in transformers; its tasks: {has}"
        )
    if name == "image-feature-extraction" and isinstance(task, HeadTask):
        if task.modality(config) != VISION:
            kind = "audio" if task.modality(config) == AUDIO else "text"
            raise ConfigError(
                f"image-feature-extraction needs a vision model; '{config.model_type}' is a "
                f"{kind} model: use --task feature-extraction"
            )
    return task


def _speech_llm_task(name: str, config: ArchitectureConfig) -> Task:
    """A speech LLM converts with every encoder under either audio task name. Asked for
    ``image-text-to-text``, one that takes images too converts its image path alone, as asked,
    saying the audio is left out; any other task would leave its audio path out, which only
    ``--features text-only`` asks for."""
    if name in (ASR, AUDIO_TEXT):
        return audio_task(config, name)
    images = TASKS["image-text-to-text"]
    if name == images.name and images.supports(config):
        log.warning(
            "%s: --task image-text-to-text converts its image path alone, without its audio "
            "path (build without --task for both encoders)",
            config.model_type,
        )
        return images
    both = ASR if in_speech_mapping(config.hf_config) else AUDIO_TEXT
    raise ConfigError(
        f"'{config.model_type}' is a speech LLM: --task {name} would convert it without its "
        f"audio path; build it without --task ({both}: its encoders, embedding and decoder), "
        "or add --features text-only for its text decoder alone"
    )
