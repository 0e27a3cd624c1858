"""Build features (``mobius build --features a,b``): rewrites of a built causal LM's graph.

Each feature is one function in :data:`FEATURES` that rewrites the saved-to-be package in place
(``ModelPackage.model`` and the texts written beside it: ``mobius.json``, ``genai_config.json``).
They run after the build, in a fixed order (:data:`ORDER`), so they compose: ``static-cache``
replaces each cache's concatenation, ``fp8-kv-cache`` then changes the cache's type at the graph's
boundary. A feature the model cannot honour raises one ``ConfigError`` line (exit 2) that says why.

``text-only`` acts before tracing: ``mobius.build(features=...)`` turns an image-text-to-text
task into its decoder alone (``tasks/vlm.apply_features``); its registry entry here only checks the
result. On a model that is already text only (a causal LM) it changes nothing; on other tasks it
is refused.

Features rewrite a built ``ModelPackage``: they may import ``mobius.output`` and ``mobius.errors``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mobius.errors import ConfigError
from mobius.features.checks import package_info
from mobius.output.package import MODEL_FILE, ModelPackage, graph_names

log = logging.getLogger("mobius")


@dataclass(frozen=True)
class FeatureOptions:
    """What the features may read besides the package: the features asked for, and sizes."""

    features: tuple[str, ...] = ()
    max_seq_len: int | None = None  # static-cache's buffer length (None: the model's, capped)
    extra: dict = field(default_factory=dict)


Feature = Callable[[ModelPackage, FeatureOptions], None]


BUILD_TIME = ("text-only",)  # applied by mobius.build itself; the entry here only checks


def _text_only(package: ModelPackage, options: FeatureOptions) -> None:
    """A text-generation model is already its text decoder alone, and an image-text-to-text
    build was made as its decoder alone: nothing to do."""
    task = package_info(package).get("task")
    if task in ("image-text-to-text", "automatic-speech-recognition", "audio-text-to-text"):
        return
    if task not in ("text-generation", "causal-lm"):
        raise ConfigError(
            f"--features text-only applies to text-generation and image-text-to-text models; "
            f"this is a {task} model"
        )
    log.info("text-only: the model is already a text decoder alone")


def _registry() -> dict[str, Feature]:
    from mobius.features.fp8_cache import fp8_kv_cache
    from mobius.features.prune import prune_prefill_prefix
    from mobius.features.static_cache import static_cache

    return {
        "static-cache": static_cache,
        "prune-prefill-prefix": prune_prefill_prefix,
        "fp8-kv-cache": fp8_kv_cache,
        "text-only": _text_only,
    }


# feature name -> rewrite; the order of application is ORDER's, not the command line's
FEATURES: dict[str, Feature] = {}
ORDER = ("text-only", "prune-prefill-prefix", "static-cache", "fp8-kv-cache")
INCOMPATIBLE = {
    frozenset({"static-cache", "fp8-kv-cache"}): "onnxruntime has no float8 TensorScatter kernel, "
    "so a float8 buffer cannot be updated in place",
}


def known() -> dict[str, Feature]:
    """The registry (filled on first use, so importing this module stays cheap)."""
    if not FEATURES:
        FEATURES.update(_registry())
    return FEATURES


def parse_features(
    values: Iterable[str] | None, *, max_seq_len: int | None = None
) -> tuple[str, ...]:
    """Names from repeated ``--features`` values, each a comma list, in application order;
    unknown names, incompatible pairs and options without their feature are refused."""
    names: list[str] = []
    for value in values or ():
        for name in value.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    unknown = [n for n in names if n not in known()]
    if unknown:
        raise ConfigError(
            f"unknown feature {', '.join(repr(n) for n in unknown)}; known features: "
            f"{', '.join(ORDER)}"
        )
    for pair, reason in INCOMPATIBLE.items():
        if pair <= set(names):
            raise ConfigError(
                f"--features {' and '.join(sorted(pair))} cannot be combined: {reason}"
            )
    if max_seq_len is not None and "static-cache" not in names:
        raise ConfigError("--max-seq-len sizes the static cache; add --features static-cache")
    return tuple(n for n in ORDER if n in names)


def apply_features(
    package: ModelPackage, features: Iterable[str], *, max_seq_len: int | None = None
) -> ModelPackage:
    """Apply ``features`` (names, already parsed) to ``package`` in place; returns it.

    ``mobius.json`` records them under ``features`` and its graph names are refreshed.
    """
    names = parse_features(features, max_seq_len=max_seq_len)
    if not names:
        return package
    rewrites = [n for n in names if n not in BUILD_TIME]
    if rewrites and package.model is None:
        raise ConfigError(
            f"--features {','.join(rewrites)} apply to single-graph causal LMs; this model has "
            f"the graphs {', '.join(package.graphs())}"
        )
    options = FeatureOptions(features=names, max_seq_len=max_seq_len)
    for name in names:
        known()[name](package, options)
    info = package_info(package)
    if info:
        info["features"] = list(names)
        if package.model is not None:
            info["graphs"] = {MODEL_FILE: graph_names(package.model)}
        package.texts["mobius.json"] = json.dumps(info, indent=2)
    for model in [package.model] if package.model is not None else package.models.values():
        model.metadata_props["mobius.features"] = ",".join(names)
    return package
