"""A diffusers model's ``config.json`` seen as mobius's ArchitectureConfig.

diffusers configs name their class (``_class_name``), not a ``model_type``; the class name takes
that place in messages and reports. ``DiffusersConfig`` answers the few attribute reads that
tasks, patterns and reports make of a transformers config (``get_text_config``, ``getattr``).
"""

from __future__ import annotations

from typing import Any

from mobius.errors import ConfigError
from mobius.sources.config import ArchitectureConfig, plain_architecture


class DiffusersConfig:
    """Attribute access over a diffusers config dict (missing keys read as absent)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = dict(values)

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __deepcopy__(self, memo: dict) -> DiffusersConfig:
        import copy

        return DiffusersConfig(copy.deepcopy(self._values, memo))

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def get_text_config(self, *args: Any, **kwargs: Any) -> DiffusersConfig:
        return self


def class_name(config: dict) -> str | None:
    """The diffusers class a ``config.json`` names, or None when it is no diffusers config."""
    name = config.get("_class_name")
    return name if isinstance(name, str) and name else None


def model_class(name: str) -> type:
    """The ``diffusers`` model class called ``name``; a ConfigError when diffusers has none."""
    try:
        import diffusers
    except ImportError:  # pragma: no cover - the extra is installed in CI
        raise ConfigError(
            f"config.json names the diffusers class '{name}'; install the extra: "
            "pip install 'mobius[diffusers]'"
        ) from None
    import torch

    found = getattr(diffusers, name, None)
    if not (isinstance(found, type) and issubclass(found, torch.nn.Module)):
        import difflib

        known = [n for n in dir(diffusers) if n.endswith(("Model", "Model2D", "Model3D"))]
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(f"unknown diffusers _class_name '{name}' (no such model class){hint}")
    return found


def architecture(config: dict) -> ArchitectureConfig:
    """The ArchitectureConfig of a diffusers ``config.json`` (sizes are not the model's)."""
    name = class_name(config) or "diffusers"
    values = {k: v for k, v in config.items() if not k.startswith("_")}
    return plain_architecture(name, DiffusersConfig(values))
