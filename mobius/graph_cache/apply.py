"""``apply_weights``: a built package's graphs with another checkpoint's weights.

The fine-tunes of one base, or the checkpoints of one training run, share their graphs: build
once, then apply each checkpoint's weights, which only reads, casts or quantizes and writes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mobius.errors import ConfigError, UnsupportedError, WeightsError

if TYPE_CHECKING:
    from mobius.output.package import ModelPackage
    from mobius.sources.resolve import Source

__all__ = ["GraphOnly", "apply_weights"]

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
    shapes), cast, quantized and packed as ``package``'s were. ``package`` is unchanged. A package
    built with ``weights=False`` (its trace kept: ``GraphOnly``) gets its graphs emitted once,
    bound to the first checkpoint applied; every other package is rebound (``warm.rebind``)."""
    if isinstance(package.weights_applier, GraphOnly):
        return package.weights_applier(package, checkpoint, trust_remote_code=trust_remote_code)
    source = _resolve(package, checkpoint, trust_remote_code)
    return _rebind(package, source, str(checkpoint))


class GraphOnly:
    """``apply_weights`` for a package built with ``weights=False``: ``emit_bound(source, src)``
    (``mobius.convert``) emits the kept trace's graphs again, bound to a checkpoint, and runs
    every step a build with weights runs after binding (EP rewrite, quantization, packing, the
    texts), with the build's own options; no trace. The first package it makes is kept, and
    each checkpoint applied (the first too) gets a copy with its recipes rebound: after the first,
    applying a checkpoint only reads, transforms and writes weights (one whose tensors are stored
    in other dtypes than the first's, or weights that cannot be rebound, gets its graphs emitted
    again instead)."""

    def __init__(self, emit_bound: Callable[[Source, str], ModelPackage]) -> None:
        self.emit_bound = emit_bound
        self.bound: ModelPackage | None = None

    def __call__(
        self, package: ModelPackage, checkpoint: str | os.PathLike, *, trust_remote_code: bool
    ) -> ModelPackage:
        from mobius.graph_cache.recipe import Unsafe
        from mobius.graph_cache.warm import rebind

        source, src = _resolve(package, checkpoint, trust_remote_code), str(checkpoint)
        if self.bound is None:
            self.bound = self.emit_bound(source, src)  # kept unseen: a copy is handed out
        try:
            made = rebind(self.bound, source, src)
        except (WeightsError, Unsafe):  # tensors stored otherwise (bf16, not f32): emit again
            made = self.emit_bound(source, src)
        made.weights_applier = apply_weights
        return made


def _resolve(package: ModelPackage, checkpoint: str | os.PathLike, trust_remote_code: bool):
    """``checkpoint``'s source (config and tensor headers), its config checked against the
    package's."""
    from mobius.sources.resolve import resolve

    source = resolve(checkpoint, trust_remote_code=trust_remote_code)
    _check_config(package, source.directory)
    return source


def _rebind(package: ModelPackage, source: Source, src: str) -> ModelPackage:
    from mobius.graph_cache.recipe import Unbound, Unsafe
    from mobius.graph_cache.warm import rebind

    try:
        made = rebind(package, source, src)
    except Unbound:
        raise UnsupportedError(
            "this package holds no checkpoint weights to replace (made without weights, and "
            "not by mobius.build with weights=False)"
        ) from None
    except Unsafe as exc:
        raise UnsupportedError(f"cannot apply other weights to this package: {exc}") from None
    made.weights_applier = apply_weights
    return made
