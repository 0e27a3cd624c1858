"""``apply_weights``: a built package's graphs with another checkpoint's weights.

The fine-tunes of one base, or the checkpoints of one training run, share their graphs: build
once, then apply each checkpoint's weights, which only reads, casts or quantizes and writes them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mobius.errors import ConfigError, UnsupportedError

if TYPE_CHECKING:
    from mobius.output.package import ModelPackage

__all__ = ["apply_weights"]

_IGNORED = ("_name_or_path", "_commit_hash", "transformers_version")


def _config(path: Path) -> dict[str, Any] | None:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (
        {k: v for k, v in config.items() if k not in _IGNORED} if isinstance(config, dict) else None
    )


def _check_config(package: ModelPackage, directory: Path) -> None:
    """The new checkpoint's config.json must be the package's (but for where it was saved)."""
    old_path = next((p for p in package.extra_files if Path(p).name == "config.json"), None)
    if old_path is None:
        return  # a GGUF file's config is rebuilt from the file; its tensors are still checked
    old, new = _config(Path(old_path)), _config(directory / "config.json")
    if old is None or new is None or old == new:
        return
    fields = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    shown = ", ".join(fields[:6]) + (f" and {len(fields) - 6} more" if len(fields) > 6 else "")
    raise ConfigError(
        f"{directory} has another config than the package was built from ({shown} differ); "
        "build it with mobius.build instead"
    )


def apply_weights(
    package: ModelPackage, checkpoint: str | os.PathLike, *, trust_remote_code: bool = False
) -> ModelPackage:
    """A new package: ``package``'s graphs and companion texts, with the weights of
    ``checkpoint`` (a directory, hub id or GGUF file of the same architecture, config and tensor
    shapes), cast, quantized and packed as ``package``'s were. ``package`` is unchanged."""
    from mobius.graph_cache.recipe import Unbound, Unsafe
    from mobius.graph_cache.warm import rebind
    from mobius.sources.resolve import resolve

    source = resolve(checkpoint, trust_remote_code=trust_remote_code)
    _check_config(package, source.directory)
    try:
        return rebind(package, source, str(checkpoint))
    except Unbound:
        raise UnsupportedError(
            "this package holds no checkpoint weights to replace (built with weights=False); "
            "build it from one checkpoint with weights, then apply the others to it"
        ) from None
    except Unsafe as exc:
        raise UnsupportedError(f"cannot apply other weights to this package: {exc}") from None
