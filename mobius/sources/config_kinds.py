"""Config fields that are not sizes but that transformers uses unchecked: rope parameters,
epsilons, ``layer_types``, ``architectures``, ``quantization_config`` and the sub-configs; each
wrong kind is a one-line ``ConfigError`` (found by fuzzing, ``tests/mobius/testing/test_fuzz.py``)."""

from __future__ import annotations

import math
from typing import Any

from mobius.errors import ConfigError

# Fields that must hold a JSON object when set (transformers calls methods on them).
OBJECT_FIELDS = ("quantization_config", "rope_parameters", "rope_scaling")
# Rope fields that must be positive finite numbers when set (mscale may be 0: DeepSeek's is).
ROPE_POSITIVE = (
    "rope_theta",
    "factor",
    "original_max_position_embeddings",
    "low_freq_factor",
    "high_freq_factor",
    "partial_rotary_factor",
    "attention_factor",
    "beta_fast",
    "beta_slow",
)
EPS_FIELDS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps")


def check_kinds(config: dict, prefix: str) -> None:
    """Fields that are not sizes but that transformers uses unchecked: rope parameters, epsilons,
    ``layer_types``, ``quantization_config`` (found by fuzzing,
    ``tests/mobius/testing/test_fuzz.py``)."""
    sub_configs = [k for k, v in config.items() if k.endswith("_config") and v is not None]
    for name in (*OBJECT_FIELDS, *sub_configs):
        value = config.get(name)
        if value is not None and not isinstance(value, dict):
            raise ConfigError(
                f"config field {prefix}{name} must be a JSON object, got {value!r}; fix config.json"
            )
    for name in ("rope_parameters", "rope_scaling"):
        rope = config.get(name)
        if isinstance(rope, dict) and rope and all(isinstance(v, dict) for v in rope.values()):
            for layer_type, params in rope.items():  # per layer type (Gemma 3)
                _check_rope(f"{prefix}{name}.{layer_type}", params)
        elif isinstance(rope, dict):
            _check_rope(f"{prefix}{name}", rope)
    for name in ("rope_theta", "partial_rotary_factor"):
        _check_number(f"{prefix}{name}", config.get(name), positive=True)
    for name in EPS_FIELDS:
        _check_number(f"{prefix}{name}", config.get(name), positive=False)
    _check_names(config, prefix, "architectures", 'class names such as ["LlamaForCausalLM"]')
    _check_names(config, prefix, "layer_types", "layer type names")


def _check_names(config: dict, prefix: str, field: str, what: str) -> None:
    """``config[field]``, when set, is a list of strings."""
    value = config.get(field)
    if value is not None and (
        not isinstance(value, list) or not all(isinstance(v, str) for v in value)
    ):
        raise ConfigError(
            f"config field {prefix}{field} must be a list of {what}, got {value!r}; fix config.json"
        )


def _check_rope(name: str, rope: dict) -> None:
    for key in ("rope_type", "type"):
        if key in rope and not isinstance(rope[key], str):
            raise ConfigError(
                f"config field {name}.{key} must be a name such as 'default' or 'linear', "
                f"got {rope[key]!r}; fix config.json"
            )
    for key in ROPE_POSITIVE:
        _check_number(f"{name}.{key}", rope.get(key), positive=True)
    for key in ("short_factor", "long_factor"):  # longrope: one number per rotary frequency
        value = rope.get(key)
        if value is not None and (
            not isinstance(value, list) or not all(_is_number(v) for v in value)
        ):
            raise ConfigError(
                f"config field {name}.{key} must be a list of numbers, got {value!r}; fix config.json"
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_number(name: str, value: Any, *, positive: bool) -> None:
    """A finite real number, > 0 (``positive``) or >= 0; None means unset."""
    if value is None:
        return
    if not _is_number(value) or value < 0 or (positive and value == 0):
        bound = "positive" if positive else "non-negative"
        raise ConfigError(
            f"config field {name} must be a {bound} finite number, got {value!r}; fix config.json"
        )
