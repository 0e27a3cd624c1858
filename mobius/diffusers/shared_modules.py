"""Model classes that run on another component's modules (diffusers' ``from_transformer``).

A Z-Image ControlNet holds only its control layers: its pipeline hands it the transformer's
timestep, patch and caption embedders, rotary table, refiners and pad tokens
(``ZImageControlNetModel.from_transformer``), and its checkpoint has none of their weights. It
converts from its pipeline directory: the sibling component's ``config.json`` joins its config
under ``SHARED_CONFIG`` (its input widths are the transformer's), the trace attaches a sibling
built from it on meta, and the sibling's tensors under the shared names join the checkpoint
(the names are the same in both modules' state dicts). A ControlNet directory without the
sibling is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from mobius.errors import ConfigError

SHARED_CONFIG = "shared_component_config"  # the sibling's config, inside the class's config

# class -> (sibling directory, the sibling's state-dict prefixes the class runs on)
SHARES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ZImageControlNetModel": ("transformer", (
        "t_embedder.", "all_x_embedder.", "cap_embedder.", "noise_refiner.", "context_refiner.",
        "x_pad_token", "cap_pad_token")),
}  # fmt: skip


def sibling(name: str, directory: Path) -> Path | None:
    """The sibling directory class ``name`` (in ``directory``) runs on, or None when it runs
    on its own modules; a ConfigError when the sibling is missing."""
    if name not in SHARES:
        return None
    folder = directory.parent / SHARES[name][0]
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"{name} runs on its pipeline's {SHARES[name][0]} modules (diffusers' "
            f"from_transformer), which {directory} lacks: convert it from its pipeline directory, "
            f"beside {SHARES[name][0]}/"
        )
    return folder


def with_sibling_config(config: dict, directory: Path) -> dict:
    """``config`` (class ``_class_name``'s, in ``directory``) with its sibling's config joined."""
    folder = sibling(config.get("_class_name", ""), directory)
    if folder is None:
        return config
    shared = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return config | {SHARED_CONFIG: shared}


def join(source: Any, directory: Path) -> None:
    """``source`` (a model directory's) with its sibling's config and shared tensors joined."""
    name = source.config.get("_class_name", "")
    folder = sibling(name, directory)
    if folder is None:
        return
    from mobius.sources import resolve

    source.config = with_sibling_config(source.config, directory)
    if source.tensors:
        prefixes = SHARES[name][1]
        other = resolve.resolve(folder, need_weights=True)
        source.tensors.update({k: v for k, v in other.tensors.items() if k.startswith(prefixes)})


def shared_config(values: dict) -> tuple[dict, dict | None]:
    """A config's values less the sibling's config, and the sibling's config (or None)."""
    values = dict(values)
    return values, values.pop(SHARED_CONFIG, None)


def attach(model: torch.nn.Module, shared: dict) -> torch.nn.Module:
    """``model`` given a sibling built from config ``shared`` (on the current device context)."""
    from mobius.diffusers.config import model_class

    other = model_class(shared["_class_name"]).from_config(shared)
    return type(model).from_transformer(model, other)


def with_pretrained_sibling(model: torch.nn.Module, directory: Path, dtype: Any) -> torch.nn.Module:
    """``model`` (loaded from ``directory``) given its sibling loaded from the pipeline beside
    it, as its pipeline does; ``model`` itself where it runs on its own modules."""
    from mobius.diffusers.config import model_class

    folder = sibling(type(model).__name__, directory)
    if folder is None:
        return model
    shared = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    other = model_class(shared["_class_name"]).from_pretrained(folder, torch_dtype=dtype).eval()
    return type(model).from_transformer(model, other)
