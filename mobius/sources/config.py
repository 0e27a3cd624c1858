"""A flat, typed view of a HuggingFace config, validated before anything is allocated."""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from mobius import failures
from mobius.errors import ConfigError
from mobius.sources.config_kinds import check_kinds

log = logging.getLogger("mobius")

# Sizes above these are certainly a broken config, not a real model. The largest released models
# stay far below them (vocab ~256k, hidden ~25k, intermediate ~74k, head_dim 512, 10M positions),
# and they are checked before anything is allocated: building a layer even on the meta device
# makes the allocator reserve each weight matrix for a moment.
MAX_VOCAB = 10_000_000
MAX_HIDDEN = 65_536
MAX_INTERMEDIATE = 1_048_576
MAX_LAYERS = 10_000
MAX_HEADS = 10_000
MAX_HEAD_DIM = 16_384
MAX_POSITIONS = 1 << 28
MAX_EXPERTS = 65_536
MAX_IMAGE = 65_536
MAX_MATRIX_ELEMENTS = 1 << 34  # one weight matrix: 64 GiB in f32

# config.json field -> (smallest, largest) allowed value; absent or null fields are not checked.
SIZE_FIELDS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("vocab_size",), (1, MAX_VOCAB)),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), (1, MAX_HIDDEN)),
    **dict.fromkeys(
        (
            "intermediate_size",
            "ffn_dim",
            "d_ff",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "moe_intermediate_size",
        ),
        (1, MAX_INTERMEDIATE),
    ),
    **dict.fromkeys(("n_inner", "shared_expert_intermediate_size"), (0, MAX_INTERMEDIATE)),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers"), (1, MAX_LAYERS)),
    **dict.fromkeys(
        (
            "num_attention_heads",
            "n_head",
            "num_heads",
            "n_heads",
            "num_key_value_heads",
            "num_kv_heads",
            "n_head_kv",
        ),
        (1, MAX_HEADS),
    ),
    **dict.fromkeys(("head_dim",), (1, MAX_HEAD_DIM)),
    **dict.fromkeys(("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"), (0, MAX_HEAD_DIM)),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), (1, MAX_HIDDEN)),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "n_ctx"), (1, MAX_POSITIONS)),
    **dict.fromkeys(("sliding_window",), (0, MAX_POSITIONS)),
    **dict.fromkeys(
        ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok"),
        (0, MAX_EXPERTS),
    ),
    **dict.fromkeys(("image_size", "patch_size"), (1, MAX_IMAGE)),
    **dict.fromkeys(("num_channels",), (1, 1024)),
}


# A size that may vary by layer: one int for every layer, or one per layer (transformers 5's
# ``per_layer_config``, e.g. Gemma 4's full-attention layers with a wider head_dim).
Size = int | tuple[int, ...] | None


@dataclass(frozen=True)
class ArchitectureConfig:
    """The facts about a model that tasks, patterns and error messages need.

    Sizes that the config varies by layer (``per_layer_config``) are tuples with one value per
    layer; ``at_layer`` reads either form for one layer.
    """

    model_type: str
    architectures: tuple[str, ...]
    hidden_size: int | None
    num_layers: int | None
    num_attention_heads: Size
    num_key_value_heads: Size
    head_dim: Size
    vocab_size: int | None
    is_encoder_decoder: bool
    tie_word_embeddings: bool
    hf_config: Any = field(repr=False, compare=False)  # transformers.PretrainedConfig

    def at_layer(self, name: str, layer: int) -> int | None:
        """The value of size ``name`` (e.g. ``"head_dim"``) in layer ``layer``."""
        value = getattr(self, name)
        return value[layer] if isinstance(value, tuple) else value


def per_layer_values(cfg: Any, name: str) -> tuple[Any, ...] | None:
    """The value of ``name`` in each layer where ``cfg`` varies it by layer (``per_layer_config``),
    else None. Reading such a field from the config itself raises transformers'
    ``AmbiguousGlobalPerLayerAttributeError``."""
    varying = getattr(cfg, "per_layer_attributes", None)  # None unless heterogeneous
    if not varying:
        return None
    name = getattr(cfg, "attribute_map", {}).get(name, name)
    if name not in varying:
        return None
    return tuple(getattr(layer, name, None) for layer in cfg.per_layer_config)


def read(cfg: Any, name: str, default: Any = None) -> Any:
    """``getattr(cfg, name, default)`` that also reads fields varying by layer: their one value
    where every layer agrees, else a tuple with one value per layer."""
    values = per_layer_values(cfg, name)
    if values is None:
        return getattr(cfg, name, default)
    return values[0] if all(v == values[0] for v in values) else values


def _first(cfg: Any, *names: str) -> Any:
    for name in names:
        value = read(cfg, name)
        if value is not None:
            return value
    return None


def position_limit(hf_config: Any) -> int | None:
    """The length of the text model's position table (``max_position_embeddings`` or
    ``n_positions``), or None where the config names none (XLNet's -1 included)."""
    text = hf_config.get_text_config() if hf_config is not None else None
    positions = read(text, "max_position_embeddings") or read(text, "n_positions")
    if isinstance(positions, tuple):  # varies by layer: the shortest table bounds the model
        positions = min((p for p in positions if isinstance(p, int) and p > 0), default=None)
    return positions if isinstance(positions, int) and positions > 0 else None


def known_model_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return sorted(CONFIG_MAPPING.keys())  # includes types registered with AutoConfig.register


def hf_config_from_dict(config: dict) -> Any:
    """Build the transformers config object, rejecting unknown model types with suggestions."""
    from transformers import AutoConfig, PretrainedConfig

    model_type = config.get("model_type")
    if not model_type:
        raise ConfigError(
            "config.json has no 'model_type'; add it (e.g. \"llama\") or regenerate the config"
        )
    if not isinstance(model_type, str):
        raise ConfigError(f"config.json 'model_type' must be a string, got {model_type!r}")
    check_sizes(config)
    known = known_model_types()
    if model_type not in known:
        close = difflib.get_close_matches(str(model_type), known, n=3, cutoff=0.6)
        hint = (
            f"; did you mean {', '.join(repr(c) for c in close)}?"
            if close
            else "; check the spelling against the model's documentation (e.g. 'llama', 'qwen2')"
        )
        raise ConfigError(
            f"unknown model_type '{model_type}' (transformers does not know it){hint}"
        )
    values = {k: v for k, v in config.items() if k not in ("model_type", "transformers_version")}
    values = PretrainedConfig._decode_special_floats(values)  # {"__float__": "Infinity"} -> inf
    try:
        hf_config = AutoConfig.for_model(model_type, **values)
    except Exception as exc:
        failures.raise_if_fatal(exc)
        # transformers' validators prefix their reason ("Class validation error for validator
        # 'validate_architecture': ValueError: ..."); the reason alone is the useful part
        reason = re.sub(r"^.*?validat\w* error for [^:]*: (\w+Error: )?", "", str(exc))
        reason = reason.rstrip(". ")
        raise ConfigError(
            f"config.json is not a valid {model_type} config: {reason}; fix config.json"
        ) from None
    _warn_defaulted(config, hf_config)
    return hf_config


CORE_FIELDS = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads"),
    "vocab_size": ("vocab_size",),
}


def _warn_defaulted(config: dict, hf_config: Any) -> None:
    """Say when a core size is missing from config.json and transformers' default stands in."""
    dicts = [
        config,
        *(v for k, v in config.items() if isinstance(v, dict) and k.endswith("_config")),
    ]
    for name, aliases in CORE_FIELDS.items():
        if any(a in d for d in dicts for a in aliases):
            continue
        value = read(hf_config, name)
        if value is not None:
            log.warning(
                "config.json does not set %s; using the %s default %s",
                name,
                hf_config.model_type,
                value,
            )


def check_sizes(config: dict, prefix: str = "") -> None:
    """Check the size fields of a raw config dict (and its sub-configs) before any object is built."""
    mla = "kv_lora_rank" in config or "qk_nope_head_dim" in config  # head_dim may be unused (0)
    for name, (lower, upper) in SIZE_FIELDS.items():
        if name in config:
            lower = 0 if mla and name == "head_dim" else lower
            _check_size(prefix + name, config[name], upper, lower)
    heads = _raw(config, "num_attention_heads", "n_head", "num_heads", "n_heads")
    kv_heads = _raw(config, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if isinstance(heads, int) and isinstance(kv_heads, int) and heads % kv_heads:
        raise ConfigError(
            f"{prefix}num_attention_heads={heads} is not a multiple of "
            f"{prefix}num_key_value_heads={kv_heads}; fix config.json"
        )
    _check_experts(config, prefix)
    check_kinds(config, prefix)
    for key, value in config.items():
        if key == "per_layer_config" and isinstance(value, dict):
            _check_layer_sizes(config, value, prefix)
        elif isinstance(value, dict) and key.endswith("_config"):
            check_sizes(value, prefix=f"{prefix}{key}.")


def _check_layer_sizes(config: dict, per_layer: dict, prefix: str) -> None:
    """Check each layer's overrides (``per_layer_config``) as that layer sees its config: the
    global values with the layer's own on top."""
    plain = {k: v for k, v in config.items() if not isinstance(v, dict)}
    for layer, overrides in per_layer.items():
        if isinstance(overrides, dict):
            merged = {**plain, **{k: v for k, v in overrides.items() if not isinstance(v, dict)}}
            check_sizes(merged, prefix=f"{prefix}per_layer_config.{layer}.")


def _check_experts(config: dict, prefix: str) -> None:
    """Routing that cannot pick: more experts per token than experts, or DeepSeek's groups that do
    not divide the experts (or pick more groups than there are)."""
    experts = _raw(config, "num_local_experts", "num_experts", "n_routed_experts")
    per_token = config.get("num_experts_per_tok")
    if _positive(experts) and _positive(per_token) and per_token > experts:
        raise ConfigError(
            f"{prefix}num_experts_per_tok={per_token} is more than the {experts} experts; "
            "fix config.json"
        )
    groups, top_groups = config.get("n_group"), config.get("topk_group")
    if _positive(experts) and _positive(groups) and experts % groups:
        raise ConfigError(
            f"{prefix}n_group={groups} does not divide the {experts} routed experts; fix config.json"
        )
    if _positive(groups) and _positive(top_groups) and top_groups > groups:
        raise ConfigError(
            f"{prefix}topk_group={top_groups} is more than n_group={groups}; fix config.json"
        )


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _raw(config: dict, *names: str) -> int | None:
    """The first of ``names`` set in a raw config (sizes already checked to be positive ints)."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return None


def _check_size(name: str, value: Any, upper: int, lower: int = 1) -> None:
    if value is None:
        return
    if isinstance(value, dict) and value:  # per-part sizes (lxmert's layers)
        value = list(value.values())
    if isinstance(value, (list, tuple)) and value:  # per-stage or per-layer sizes, image [h, w]
        for item in value:
            _check_size(name, item, upper, lower)
        return
    if isinstance(value, float) and value.is_integer():  # some configs write 1200.0
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config field {name} must be an integer, got {value!r}; fix config.json")
    if value < lower or value > upper:
        raise ConfigError(
            f"config field {name}={value} is out of range ({lower}..{upper}); fix config.json"
        )


def _largest(value: Any) -> Any:
    """The largest of per-layer sizes (a tuple); any other value as it is."""
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        return max(value)
    return value


def _check_matrix(what: str, *dims: Any) -> None:
    """Refuse a config whose single weight matrix would be absurdly large."""
    dims = tuple(_largest(d) for d in dims)
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return
    elements = 1
    for d in dims:
        elements *= d
    if elements > MAX_MATRIX_ELEMENTS:
        raise ConfigError(
            f"config.json implies a {what} matrix of {' x '.join(map(str, dims))} = {elements:.3g} "
            f"elements (limit {MAX_MATRIX_ELEMENTS:.3g}); the sizes are wrong, fix config.json"
        )


def from_hf(hf_config: Any) -> ArchitectureConfig:
    """Flatten and validate a transformers config."""
    text = getattr(hf_config, "text_config", None)
    cfg = text if text is not None and _first(hf_config, "hidden_size") is None else hf_config
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model", "dim")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads")
    kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    kv_heads = heads if kv_heads is None else kv_heads
    vocab = _first(cfg, "vocab_size")
    head_dim = _first(cfg, "head_dim")
    intermediate = _first(cfg, "intermediate_size", "ffn_dim", "n_inner", "d_ff")
    # the same limits again, on the values transformers filled in (defaults, attribute maps)
    _check_size("vocab_size", vocab, MAX_VOCAB)
    _check_size("hidden_size", hidden, MAX_HIDDEN)
    _check_size("num_hidden_layers", layers, MAX_LAYERS)
    _check_size("num_attention_heads", heads, MAX_HEADS)
    _check_size("num_key_value_heads", kv_heads, MAX_HEADS)
    _check_size("head_dim", head_dim, MAX_HEAD_DIM)
    _check_size("intermediate_size", intermediate, MAX_INTERMEDIATE, lower=0)
    _check_matrix("embedding (vocab_size x hidden_size)", vocab, hidden)
    _check_matrix("MLP (intermediate_size x hidden_size)", intermediate, hidden)
    _check_matrix(
        "attention (num_attention_heads x head_dim x hidden_size)",
        heads,
        head_dim if head_dim is not None else 1,
        hidden,
    )
    if head_dim is None and isinstance(hidden, int):
        head_dim = _derived_head_dim(hidden, heads)
    _check_grouping(heads, kv_heads)
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


def _per_layer(value: Size, layers: int) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,) * layers


def _derived_head_dim(hidden: int, heads: Size) -> Size:
    """``hidden_size // num_attention_heads`` (per layer where the heads vary), refusing a
    remainder."""
    if not isinstance(heads, (int, tuple)):
        return None
    dims = []
    for layer, count in enumerate(_per_layer(heads, 1)):
        if not isinstance(count, int):
            return None
        if hidden % count:
            where = f" in layer {layer}" if isinstance(heads, tuple) else ""
            raise ConfigError(
                f"hidden_size={hidden} is not divisible by num_attention_heads={count}{where}; "
                "fix config.json"
            )
        dims.append(hidden // count)
    return dims[0] if len(set(dims)) == 1 else tuple(dims)


def _check_grouping(heads: Size, kv_heads: Size) -> None:
    """Every layer's attention heads must be a multiple of its key/value heads."""
    layers = max(len(v) if isinstance(v, tuple) else 1 for v in (heads, kv_heads))
    pairs = zip(_per_layer(heads, layers), _per_layer(kv_heads, layers), strict=False)
    for layer, (count, kv_count) in enumerate(pairs):
        if isinstance(count, int) and isinstance(kv_count, int) and count % kv_count:
            where = f" in layer {layer}" if layers > 1 else ""
            raise ConfigError(
                f"num_attention_heads={count} is not a multiple of "
                f"num_key_value_heads={kv_count}{where}; fix config.json"
            )


def plain_architecture(name: str, hf_config: Any) -> ArchitectureConfig:
    """The ArchitectureConfig of a model that is not a transformers one (a plain module, a
    diffusers model): its class name, none of a transformer's sizes."""
    return ArchitectureConfig(
        model_type=name,
        architectures=(name,),
        hidden_size=None,
        num_layers=None,
        num_attention_heads=None,
        num_key_value_heads=None,
        head_dim=None,
        vocab_size=None,
        is_encoder_decoder=False,
        tie_word_embeddings=False,
        hf_config=hf_config,
    )
