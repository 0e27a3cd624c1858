"""A tiny, valid config for any transformers model type, derived from the config class's defaults.

``tiny_config_for(model_type)`` starts from the defaults of the family's config class and shrinks
every size it recognises: hidden 64, 2 layers, 4 attention heads and 2 KV heads (where the family
has KV heads), vocab 256 with every special token id inside it, 4 experts with top-2, small
intermediate sizes. Per-layer lists (layer types, window patterns, ...) are cut to 2 layers,
keeping both kinds of layer where there were several; index lists (e.g. which layers are
attention) are kept inside the 2 layers. Nested sub-configs (``text_config``, ``vision_config``,
...) are shrunk the same way. Families that need values the general rules cannot derive have an
entry in ``config_tables.OVERRIDES``, with a comment saying why.

``mobius/testing/tiny.py`` keeps its hand-written table for the families its tests use; this is the
general generator that the coverage sweep (``benchmarks/coverage.py``) relies on.
"""

from __future__ import annotations

import copy
from typing import Any

from mobius.testing.config_tables import (
    COMPOUND_SCALING,
    DENSE_PREFIX,
    FILL_NONE,
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    LAYERS,
    OVERRIDES,
    SIZES,
    VOCAB,
)

_SUBCONFIG_SUFFIX = "_config"
_SPATIAL = ("image_size", "patch_size")
_NOT_WIDTHS = ("position", "window", "vocab", "token", "chunk", "length", "max_", "batch")
# Keys whose list values are indexed by layer (lists of layer indices) rather than per layer.
_INDEX_LIST_HINTS = ("layers", "layer_ids", "layer_indices", "layer_idx", "idxs", "indices")


def _distinct_two(values: list) -> list:
    """Two per-layer values, keeping two different kinds when the list has several."""
    seen: list = []
    for value in values:
        if value not in seen:
            seen.append(value)
    if len(seen) == 1:
        return [seen[0]] * LAYERS
    # keep the order in which the kinds first appear, but end with the last layer's kind where
    # that differs (hybrids often end on full attention)
    first, last = values[0], values[-1]
    if first != last:
        return [first, last]
    return seen[:LAYERS]


def _shrink_token_ids(values: dict[str, Any]) -> None:
    """Move every special token id (and lists of them) inside the tiny vocab, keeping distinct ids
    distinct."""
    taken: dict[int, int] = {}
    free = iter(range(VOCAB - 1, 0, -1))

    def remap(token: Any) -> Any:
        if not isinstance(token, int) or isinstance(token, bool) or 0 <= token < VOCAB:
            return token
        if token not in taken:
            taken[token] = next(free)
        return taken[token]

    for key, value in list(values.items()):
        if not (key.endswith("_token_id") or key.endswith("_token_ids") or key.endswith("_index")):
            continue
        if key.endswith("_index") and "token" not in key:
            continue
        if isinstance(value, list):
            values[key] = [remap(v) for v in value]
        else:
            values[key] = remap(value)


def _shrink(values: dict[str, Any], sub_defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Shrink one level of config values (a ``to_dict()``), recursing into sub-configs."""
    original = values
    values = copy.deepcopy(values)
    old_layers = next(
        (
            values[k]
            for k in ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers")
            if isinstance(values.get(k), int)
        ),
        None,
    )
    old_hidden = next(
        (values[k] for k in ("hidden_size", "n_embd", "d_model") if isinstance(values.get(k), int)),
        None,
    )
    old_ffn = values.get("intermediate_size")
    for key, value in list(values.items()):
        if (
            key not in SIZES
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value >= 256
            and any(h in key for h in ("dim", "size", "hidden", "width"))
            and not any(x in key for x in _NOT_WIDTHS)
        ):
            # another name for the model width (e.g. adapter_in_dim, lru_width): keep it equal
            if value == old_hidden:
                values[key] = HIDDEN
                continue
            if value == old_ffn:
                values[key] = INTERMEDIATE
                continue
        if isinstance(value, dict) and (key.endswith(_SUBCONFIG_SUFFIX) or "model_type" in value):
            values[key] = _shrink(value)
            continue
        if key in SIZES and isinstance(value, int) and not isinstance(value, bool):
            # spatial sizes only shrink: a patch of 2 grown to 8 no longer fits the image
            values[key] = min(value, SIZES[key]) if key in _SPATIAL else SIZES[key]
            continue
        if key in SIZES and isinstance(value, list) and all(isinstance(v, int) for v in value):
            values[key] = [SIZES[key]] * len(value)  # per-layer sizes (e.g. Gemma-3n FFN widths)
            if old_layers and len(value) == old_layers:
                values[key] = [SIZES[key]] * LAYERS
            continue
        if (
            "vocab" in key
            and "offset" not in key  # Gemma-3n's per-modality token offsets stay distinct
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value > VOCAB
        ):
            values[key] = VOCAB  # other vocabs (unpadded_vocab_size, BLT's hash-group vocab) too
            continue
        if key in COMPOUND_SCALING and isinstance(value, float) and value > 1:
            values[key] = COMPOUND_SCALING[key]
            continue
        if value is None and key in FILL_NONE:
            values[key] = FILL_NONE[key]
            continue
        if key in DENSE_PREFIX and isinstance(value, int) and value > 1:
            values[key] = 1
            continue
        if old_layers and old_layers > LAYERS:
            if isinstance(value, list) and len(value) == old_layers:
                values[key] = _distinct_two(value)  # per-layer list
            elif isinstance(value, str) and len(value) == old_layers and "pattern" in key:
                values[key] = "".join(_distinct_two(list(value)))  # e.g. "M-M*-..." patterns
            elif (
                isinstance(value, list)
                and value
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
                and any(h in key for h in _INDEX_LIST_HINTS)
            ):
                inside = sorted({v for v in value if v < LAYERS})
                values[key] = inside or [LAYERS - 1]  # keep at least one such layer
    if isinstance(values.get("qk_rope_head_dim"), int) and "head_dim" in values:
        values["head_dim"] = values["qk_rope_head_dim"]  # MLA: rotary embeddings use head_dim
    if isinstance(values.get("kv_lora_rank"), int) and "num_key_value_heads" in values:
        values["num_key_value_heads"] = HEADS  # MLA: keys and values have one head per query head
    for key, value in list(values.items()):
        # "every k-th layer from offset o" (Jamba's attention / expert layers): layer 1 of 2
        if key.endswith("_layer_period") and isinstance(value, int) and value > LAYERS:
            values[key] = LAYERS
            offset = key.replace("_period", "_offset")
            if isinstance(values.get(offset), int):
                values[offset] = 1
    if isinstance(values.get("per_layer_config"), dict):
        values["per_layer_config"] = _per_layer_dict(values["per_layer_config"], original, values)
    _shrink_token_ids(values)
    _shrink_stages(original, values)
    stride = values.get("output_stride")
    if _is_int(stride) and _is_int(values.get("image_size")):
        # a backbone's total stride (MobileViT): the last feature map keeps 2x2 positions
        values["image_size"] = max(values["image_size"], 2 * stride)
    return values


_STAGE_WIDTHS = ("hidden_sizes", "embed_dims", "dims")
_MAX_STAGE_WIDTH = 128


def _after_input(channels: list[int], image_channels: int) -> list[int]:
    """A channel list without its leading input width (a stem's ``[3, 32, 48]``)."""
    return channels[1:] if channels and channels[0] == image_channels else channels


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_int_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 1
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


def _shrink_stages(original: dict[str, Any], values: dict[str, Any]) -> None:
    """Hierarchical vision backbones (a ``depths`` list: one entry per stage, each stage halving
    the resolution): keep every stage, with at most 2 blocks each; divide the stage widths (and
    the group widths that must divide them) by one power of two so the widest is at most 128,
    which keeps random-weight activations in a range where atol 1e-4 means something; keep the
    patch size (the stem's stride is often fixed in code) and make the image at least twice the
    total stride, so the last stage still has 2x2 positions (and attention windows of 2x2 tile
    every stage)."""
    depths = original.get("depths")
    if not _is_int_list(depths):
        return
    stages = len(depths)
    nested = [
        v for v in original.values() if isinstance(v, list) and len(v) == stages and v != depths
    ]
    if not any([len(x) if isinstance(x, list) else None for x in v] == depths for v in nested):
        # (TextNet's per-block kernel lists fix its depths: those stay)
        values["depths"] = [min(d, LAYERS) for d in depths]
    for key, value in original.items():
        # the stage count under a layer-count name (Swin's num_layers), and per-stage lists that
        # the per-layer rule cut to 2 entries
        if key in SIZES and value == stages and key not in ("depths",) and "layers" in key:
            values[key] = value
        elif isinstance(value, list) and len(value) == stages and key != "depths":
            if len(values.get(key) or ()) != stages:
                values[key] = [SIZES.get(key, v) if isinstance(v, int) else v for v in value]
    widths = next((original[k] for k in _STAGE_WIDTHS if _is_int_list(original.get(k))), None)
    # channel counts that must match the stage widths (a stem's output, per-stage in/out lists)
    channels = {
        k: v
        for k, v in original.items()
        if k.endswith("channels") and "num_channels" not in k and (_is_int_list(v) or _is_int(v))
    }
    image_channels = original.get("num_channels", 3)
    scaled = [*(widths or ())]
    for value in channels.values():
        scaled += _after_input(value, image_channels) if isinstance(value, list) else [value]
    factor = 1
    if widths:
        while max(widths) // factor > _MAX_STAGE_WIDTH and all(
            w % (2 * factor) == 0 for w in scaled
        ):
            factor *= 2
    for key, value in original.items():
        if key in _STAGE_WIDTHS and _is_int_list(value):
            values[key] = [v // factor for v in value]
        elif key in channels and _is_int_list(value):  # a stem list starts at the image's channels
            kept = len(value) - len(_after_input(value, image_channels))
            values[key] = value[:kept] + [v // factor for v in value[kept:]]
        elif key in channels:
            values[key] = value // factor
        elif ("width" in key or key == "num_groups") and isinstance(value, int):
            # group widths (RegNet), and group counts of group norms (BiT), so that the groups
            # still divide the narrower stages
            if factor > 1 and value % factor == 0:
                values[key] = value // factor
    embed, hidden = original.get("embed_dim"), original.get("hidden_size")
    if isinstance(embed, int) and not isinstance(embed, bool):
        # a stem width that doubles per stage (Swin): the last stage at most 128 wide, and the
        # hidden size, derived from it, kept derived
        values["embed_dim"] = min(values.get("embed_dim", embed), _MAX_STAGE_WIDTH >> (stages - 1))
        if hidden == embed * 2 ** (stages - 1):
            values["hidden_size"] = values["embed_dim"] * 2 ** (stages - 1)
    if isinstance(original.get("window_size"), int) and original["window_size"] > 2:
        # windowed attention (Swin): windows of 2x2 tile every stage of the tiny image exactly
        values["window_size"] = 2
    patch = original.get("patch_size")
    if isinstance(patch, int) and isinstance(values.get("image_size"), int):
        values["patch_size"] = patch
        values["image_size"] = max(values["image_size"], 2 * patch * 2 ** (stages - 1))


def _per_layer_dict(entries: dict, old: dict[str, Any], new: dict[str, Any]) -> dict:
    """Per-layer overrides keyed by layer index: keep those inside the 2 layers (at least one),
    with their sizes shrunk too, and still different from the global values where they were
    (Gemma 4's wider full-attention head_dim must not shrink to the sliding layers' one)."""
    inside = {k: v for k, v in entries.items() if int(k) < LAYERS}
    if not inside and entries:
        inside = {LAYERS - 1: next(iter(entries.values()))}
    out = {}
    for layer, overrides in inside.items():
        if not isinstance(overrides, dict):
            out[layer] = overrides
            continue
        small = _shrink(overrides)
        for key in sorted(small, key=_is_kv_heads):  # kv heads last: they follow the heads
            if small[key] == new.get(key) and overrides[key] != old.get(key):
                small[key] = _other_size(key, small[key], overrides, small)
        out[layer] = small
    return out


def _is_kv_heads(key: str) -> bool:
    return "key_value_heads" in key or "kv_heads" in key


def _other_size(key: str, value: Any, overrides: dict[str, Any], small: dict[str, Any]) -> Any:
    """A tiny size different from ``value`` (the shrunk global one) for a per-layer override."""
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    if _is_kv_heads(key):
        heads = overrides.get("num_attention_heads")
        if heads is not None and overrides[key] == heads:  # MLA: one kv head per query head
            return small.get("num_attention_heads", value)
        return 1 if value > 1 else 2
    return 2 * value


def _tiny_values(model_type: str) -> dict[str, Any]:
    """The shrunk values of ``model_type``'s defaults (what a sub-config left as None gets)."""
    from transformers import CONFIG_MAPPING

    values = _shrink(_defaults(CONFIG_MAPPING[model_type]))
    _apply(values, OVERRIDES.get(model_type, {}))
    return values


def _changed(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The values that differ from the defaults (nested dicts as their changed keys), so that the
    config class still derives everything else itself."""
    out = {}
    for key, value in new.items():
        if key not in old:
            out[key] = value
        elif isinstance(value, dict) and isinstance(old[key], dict):
            if "model_type" in value:  # a sub-config class: its own defaults fill the rest
                out[key] = _changed(value, old[key])
            else:  # a plain dict (rope parameters, attention options): passed whole
                out[key] = value
        elif value != old[key]:
            out[key] = value
    return out


def tiny_config_for(model_type: str, **overrides: Any):
    """A small valid ``PretrainedConfig`` for ``model_type``, from its config class's defaults.

    ``overrides`` are applied last (nested sub-configs as dicts).
    """
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    defaults = _defaults(cls)
    for key in ("transformers_version", "_name_or_path", "architectures", "model_type"):
        defaults.pop(key, None)
    values = _shrink(defaults)
    # sub-configs that default to None (the model then cannot be built, or gets full-size
    # defaults): the tiny values of their own model type
    for key, spec in getattr(cls, "sub_configs_defaults", {}).items():
        sub_type = getattr(spec, "model_type", None)
        if values.get(key) is None and sub_type in CONFIG_MAPPING:
            values[key] = _tiny_values(sub_type)
    _apply(values, OVERRIDES.get(model_type, {}))
    if values.get("is_encoder_decoder") and values.get("decoder_start_token_id") is None:
        # T5's config class leaves it unset (its checkpoints set it to the pad id); without it
        # the model cannot shift input_ids into decoder inputs, as its heads do
        values["decoder_start_token_id"] = values.get("pad_token_id") or 0
    _apply(values, overrides)
    return cls(**_changed(values, defaults))


def _defaults(cls) -> dict[str, Any]:
    """The class's default values; from its dataclass fields where its defaults do not validate."""
    import dataclasses

    try:
        return cls().to_dict()
    except Exception:  # e.g. Gemma-4 assistant: the default text config fails its own validation
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out


def _apply(values: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            _apply(values[key], value)
        else:
            values[key] = value
