"""What the features read of a built package before they rewrite it, and the check that refuses
a feature on a model it does not apply to."""

from __future__ import annotations

import json

from mobius.errors import ConfigError
from mobius.output.package import ModelPackage


def package_info(package: ModelPackage) -> dict:
    text = package.texts.get("mobius.json")
    return json.loads(text) if text else {}


def require_causal_cache(package: ModelPackage, feature: str) -> None:
    """Refuse ``feature`` unless the package is a text-generation graph with a key/value cache."""
    info = package_info(package)
    if info.get("task") not in ("text-generation", "causal-lm", None):
        raise ConfigError(
            f"--features {feature} applies to text-generation models, not {info['task']}"
        )
    names = [v.name or "" for v in package.model.graph.inputs]
    if not any(n.startswith("past_key_values.") for n in names):
        raise ConfigError(
            f"--features {feature} needs a key/value cache; this model was built without one "
            "(see `mobius explain`)"
        )
