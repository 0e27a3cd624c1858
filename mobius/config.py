"""A flat, typed view of a HuggingFace config, validated before anything is allocated."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from mobius.errors import ConfigError

# Sizes above these are certainly a broken config, not a real model.
MAX_VOCAB = 10_000_000
MAX_HIDDEN = 1_000_000
MAX_LAYERS = 10_000
MAX_HEADS = 10_000


@dataclass(frozen=True)
class ArchitectureConfig:
    """The facts about a model that tasks, patterns and error messages need."""

    model_type: str
    architectures: tuple[str, ...]
    hidden_size: int | None
    num_layers: int | None
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None
    vocab_size: int | None
    is_encoder_decoder: bool
    tie_word_embeddings: bool
    hf_config: Any = field(repr=False, compare=False)  # transformers.PretrainedConfig


def _first(cfg: Any, *names: str) -> Any:
    for name in names:
        value = getattr(cfg, name, None)
        if value is not None:
            return value
    return None


def known_model_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return sorted(CONFIG_MAPPING.keys())  # includes types registered with AutoConfig.register


def hf_config_from_dict(config: dict, *, trust_remote_code: bool = False) -> Any:
    """Build the transformers config object, rejecting unknown model types with suggestions."""
    from transformers import AutoConfig, PretrainedConfig

    model_type = config.get("model_type")
    if not model_type:
        raise ConfigError(
            "config.json has no 'model_type'; add it (e.g. \"llama\") or regenerate the config"
        )
    known = known_model_types()
    if model_type not in known:
        if trust_remote_code and config.get("auto_map"):
            return PretrainedConfig.from_dict(config)
        close = difflib.get_close_matches(str(model_type), known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(
            f"unknown model_type '{model_type}' (transformers does not know it){hint}"
        )
    values = {k: v for k, v in config.items() if k not in ("model_type", "transformers_version")}
    try:
        return AutoConfig.for_model(model_type, **values)
    except Exception as exc:
        raise ConfigError(f"config.json is not a valid {model_type} config: {exc}") from None


def _check_size(name: str, value: Any, upper: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config field {name} must be an integer, got {value!r}")
    if value <= 0 or value > upper:
        raise ConfigError(
            f"config field {name}={value} is out of range (1..{upper}); fix config.json"
        )


def from_hf(hf_config: Any) -> ArchitectureConfig:
    """Flatten and validate a transformers config."""
    text = getattr(hf_config, "text_config", None)
    cfg = text if text is not None and _first(hf_config, "hidden_size") is None else hf_config
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model", "dim")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads")
    kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    vocab = _first(cfg, "vocab_size")
    head_dim = _first(cfg, "head_dim")
    _check_size("vocab_size", vocab, MAX_VOCAB)
    _check_size("hidden_size", hidden, MAX_HIDDEN)
    _check_size("num_hidden_layers", layers, MAX_LAYERS)
    _check_size("num_attention_heads", heads, MAX_HEADS)
    _check_size("num_key_value_heads", kv_heads, MAX_HEADS)
    if isinstance(hidden, int) and isinstance(heads, int) and head_dim is None:
        if hidden % heads:
            raise ConfigError(
                f"hidden_size={hidden} is not divisible by num_attention_heads={heads}; fix config.json"
            )
        head_dim = hidden // heads
    if isinstance(heads, int) and isinstance(kv_heads, int) and heads % kv_heads:
        raise ConfigError(
            f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}; fix config.json"
        )
    return ArchitectureConfig(
        model_type=str(hf_config.model_type),
        architectures=tuple(getattr(hf_config, "architectures", None) or ()),
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        is_encoder_decoder=bool(getattr(hf_config, "is_encoder_decoder", False)),
        tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        hf_config=hf_config,
    )
