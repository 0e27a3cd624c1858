"""Maps a HF model_type to its default task (and, later, to hand-written declarative models)."""

from __future__ import annotations

from mobius.config import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.tasks import TASKS, Task
from mobius.tasks.nested import nested_model_class

_DECODER_ARCH_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def detect_task(config: ArchitectureConfig) -> Task:
    """Causal LM for decoder models, feature extraction for encoders."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING,
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING,
        MODEL_MAPPING,
    )

    def supports(mapping) -> bool:  # the lazy mappings also know classes registered at runtime
        return type(config.hf_config) in mapping

    model_type = config.model_type
    if config.is_encoder_decoder:
        return seq2seq_task(config)
    if supports(MODEL_FOR_CAUSAL_LM_MAPPING):
        named_decoder = any(a.endswith(_DECODER_ARCH_SUFFIXES) for a in config.architectures)
        is_decoder = bool(getattr(config.hf_config, "is_decoder", False))
        if not supports(MODEL_FOR_MASKED_LM_MAPPING) or named_decoder or is_decoder:
            return TASKS["causal-lm"]
    if supports(MODEL_MAPPING):
        return TASKS["feature-extraction"]
    # a text sub-config saved by a *ForCausalLM that AutoModelForCausalLM builds from its parent
    if nested_model_class(
        config.hf_config, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_CAUSAL_LM_MAPPING
    ):
        return TASKS["causal-lm"]
    raise ConfigError(
        f"no task known for model_type '{model_type}'; pass --task ({', '.join(TASKS)})"
    )


def seq2seq_task(config: ArchitectureConfig) -> Task:
    """Speech-to-text or text-to-text, by the auto mapping that builds the model."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING,
        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING,
    )

    if type(config.hf_config) in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING:
        return TASKS["automatic-speech-recognition"]
    if type(config.hf_config) in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING:
        return TASKS["text2text-generation"]
    raise ConfigError(
        f"'{config.model_type}' is an encoder-decoder model that neither "
        "AutoModelForSeq2SeqLM nor AutoModelForSpeechSeq2Seq builds; mobius does not convert it"
    )


def get_task(name: str | None, config: ArchitectureConfig) -> Task:
    if name is None:
        return detect_task(config)
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}'; choose one of: {', '.join(TASKS)}")
    return TASKS[name]
