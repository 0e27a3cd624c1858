"""Warm builds: find a build's graphs in the cache, or keep them there after a cold build.

A cold build (a miss) runs the whole pipeline, saves the package, and then keeps in the cache the
graph files exactly as saved, the companion texts, and the weight recipes (``recipe``). A warm
build (a hit) resolves the checkpoint (config and tensor headers only), loads the cached graphs,
binds the recipes to the new checkpoint and saves through the same ``ModelPackage.save``: no
trace, no torch.export and no transformers (except for a GGUF file, whose config transformers
reads), so the output is byte for byte that of a cold build.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mobius.graph_cache import evict, recipe, store
from mobius.graph_cache.key import build_key

if TYPE_CHECKING:
    from mobius.output.package import ModelPackage
    from mobius.sources.resolve import Source

__all__ = ["Lookup", "Pending", "disabled_by_environment", "find", "keep", "prepare", "rebind"]

log = logging.getLogger("mobius")

WEIGHTS = "weights.pkl"
TEXT_PREFIX = "text."


def disabled_by_environment() -> bool:
    """``MOBIUS_NO_CACHE`` set (to anything but ``0`` or empty) turns the cache off."""
    return os.environ.get("MOBIUS_NO_CACHE", "") not in ("", "0")


@dataclass
class Lookup:
    """A build's key, its resolved source, and the package when the cache had it."""

    src: str
    key: str
    source: Source
    package: ModelPackage | None = None
    document: dict[str, Any] = field(default_factory=dict)


def find(src: str, options: dict[str, Any], *, trust_remote_code: bool) -> Lookup | None:
    """Look ``src`` built with ``options`` up; None where the cache does not apply (a diffusers
    pipeline, a build without weights) or the source cannot be resolved (the build itself then
    reports why)."""
    from mobius.errors import MobiusError
    from mobius.sources.resolve import resolve

    if options.get("no_weights") or options.get("component") or _diffusers(src):
        return None
    try:
        source = resolve(src, trust_remote_code=trust_remote_code)
    except MobiusError:
        return None
    key, document = build_key(source, options)
    lookup = Lookup(str(src), key, source, document=document)
    entry = store.lookup(key)
    if entry is not None:
        with entry:  # held while its files are read: eviction leaves it alone
            try:
                lookup.package = _package(entry, source, str(src))
            except Exception as exc:  # noqa: BLE001 - any unreadable part makes it unusable
                from mobius import failures

                failures.raise_if_fatal(exc)
                store.discard(entry.path, f"{type(exc).__name__}: {exc}")
            else:
                log.info("graph cache hit %s: writing the weights only", key[:16])
    return lookup


def _diffusers(src: str) -> bool:
    """``src`` is (or may be) a diffusers pipeline or model directory, which the cache leaves to
    a cold build (read here without importing the diffusers support, which imports torch.export)."""
    path = Path(src).expanduser()
    if path.is_file() and path.name in ("model_index.json", "config.json"):
        path = path.parent
    if not path.is_dir():
        return False
    if (path / "model_index.json").is_file():
        return True
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "_diffusers_version" in config


def _package(entry: store.Entry, source: Source, src: str) -> ModelPackage:
    """The cached package, its weights bound to ``source``'s checkpoint."""
    import onnx
    import onnx_ir as ir

    from mobius.output.package import ModelPackage

    manifest = entry.manifest
    tensors = recipe.loads(entry.read(WEIGHTS), _checkpoint(source))
    graphs: dict[str, ir.Model] = {}
    for file in manifest["graphs"]:
        model = ir.serde.deserialize_model(onnx.ModelProto.FromString(entry.read(file)))
        bound = tensors[file]
        if set(bound) != set(model.graph.initializers):
            raise ValueError(f"the recipes of {file} do not match its initializers")
        for name, value in model.graph.initializers.items():
            value.const_value = bound[name]
        graphs[file] = model
    texts = {
        name: _moved(entry.read(TEXT_PREFIX + name).decode("utf-8"), manifest["src"], src)
        for name in manifest["texts"]
    }
    extra = [source.directory / name for name in manifest["extra_files"]]
    if manifest["models"]:
        models = {name: graphs[f"{name}.onnx"] for name in manifest["models"]}
        return ModelPackage(model=None, models=models, extra_files=extra, texts=texts)
    return ModelPackage(model=graphs[manifest["graphs"][0]], extra_files=extra, texts=texts)


def _moved(text: str, old: str, new: str) -> str:
    """A companion text of a build of ``old``, as a build of ``new`` writes it: the explain
    report names its source, and a GGUF build's summary names the file."""
    if old == new:
        return text
    text = text.replace(json.dumps(old), json.dumps(new))
    old_name, new_name = Path(old).name, Path(new).name
    if old_name != new_name and Path(new).suffix == ".gguf":
        pattern = rf"(?<![\w.-]){re.escape(old_name)}(?![\w.-])"
        text = re.sub(pattern, lambda _: new_name, text)
    return text


def _checkpoint(source: Source) -> Any:
    from mobius.output.weights import Checkpoint

    return source.checkpoint if source.checkpoint is not None else Checkpoint(source.tensors)


def _roots(source: Source, src: str) -> tuple[str, ...]:
    """The paths that a recipe must not name: the checkpoint's directory, files and ``src``."""
    paths = {str(source.directory), *(str(p) for p in source.weight_files)}
    given = Path(src).expanduser()
    if given.exists():
        paths.add(str(given.resolve()))
    return tuple(sorted(paths))


@dataclass
class Pending:
    """What a cold build keeps, made before its package is saved (a lazy tensor may keep what it
    computed while saving, which must not go into a recipe); the graphs are added once saved."""

    key: str
    graphs: list[str]
    files: dict[str, bytes]
    manifest: dict[str, Any]


def prepare(lookup: Lookup, package: ModelPackage) -> Pending | None:
    """The entry for ``package``, built cold and not saved yet, less its graph files; None (and
    a line in the log) for a package whose weights cannot be rebound to another checkpoint."""
    try:
        return _pending(lookup, package)
    except recipe.Unsafe as exc:
        log.info("graph cache: not keeping this build (%s)", exc)
        return None


def keep(pending: Pending, target: Path) -> None:
    """Keep ``pending`` with the graph files just saved into ``target``; the build is unaffected
    by any failure (logged)."""
    try:
        graphs = {file: (target / file).read_bytes() for file in pending.graphs}
    except OSError as exc:
        log.info("graph cache: not keeping this build (%s)", exc)
        return
    if store.put(pending.key, {**graphs, **pending.files}, pending.manifest) is not None:
        evict.trim(keep=pending.key)


def _pending(lookup: Lookup, package: ModelPackage) -> Pending:
    source = lookup.source
    graphs = package.graphs()
    # the files that travel with the model, by name: a hit copies them from its own checkpoint
    # (a GGUF file's are written into a new temporary directory by each build)
    known = {source.config_path.name, *(p.name for p in source.extra_files())}
    extra = [Path(path).name for path in package.extra_files]
    if not set(extra) <= known:
        raise recipe.Unsafe(
            f"companion files {sorted(set(extra) - known)} are not the checkpoint's"
        )
    tensors = {
        file: {name: value.const_value for name, value in model.graph.initializers.items()}
        for file, model in graphs.items()
    }
    if any(t is None for bound in tensors.values() for t in bound.values()):
        raise recipe.Unsafe("an initializer has no tensor")
    files = {WEIGHTS: recipe.dumps(tensors, _roots(source, lookup.src))}
    files.update({TEXT_PREFIX + name: text.encode("utf-8") for name, text in package.texts.items()})
    model_types = {m.metadata_props.get("mobius.model_type") for m in graphs.values()} - {None}
    manifest = {
        "src": lookup.src,
        "graphs": list(graphs),
        "models": list(package.models),
        "texts": list(package.texts),
        "extra_files": extra,
        "summary": {
            "model_type": ",".join(sorted(model_types)),
            "options": lookup.document.get("options", {}),
        },
    }
    return Pending(lookup.key, list(graphs), files, manifest)


def rebind(package: ModelPackage, source: Source, src: str) -> ModelPackage:
    """``package`` with the same graphs and texts, its weights read from ``source`` instead (a
    checkpoint of the same shape); the graphs are copied, ``package`` is left as it was."""
    import onnx_ir as ir

    from mobius.output.package import ModelPackage

    graphs = package.graphs()
    tensors = {
        file: {name: value.const_value for name, value in model.graph.initializers.items()}
        for file, model in graphs.items()
    }
    data = recipe.dumps(tensors, (), bound=True)
    bound = recipe.loads(data, _checkpoint(source))
    copies: dict[str, ir.Model] = {}
    for file, model in graphs.items():
        copy = _copy_graph(model)
        for name, value in copy.graph.initializers.items():
            value.const_value = bound[file][name]
        copies[file] = copy
    extra = [source.directory / Path(p).name for p in package.extra_files]
    try:
        old_src = json.loads(package.texts.get("explain.json", "{}")).get("source")
    except ValueError:
        old_src = None
    texts = {
        name: _moved(text, old_src, src) if old_src else text
        for name, text in package.texts.items()
    }
    if package.models:
        models = {name: copies[f"{name}.onnx"] for name in package.models}
        return ModelPackage(model=None, models=models, extra_files=extra, texts=texts)
    return ModelPackage(model=next(iter(copies.values())), extra_files=extra, texts=texts)


def _copy_graph(model: Any) -> Any:
    """A copy of ``model`` whose initializers have no tensors yet (none is read or copied)."""
    import onnx_ir as ir

    held = {}
    for name, value in model.graph.initializers.items():
        tensor = value.const_value
        held[name] = tensor
        value.const_value = ir.ExternalTensor(
            "unbound", 0, 0, dtype=tensor.dtype, shape=tensor.shape, name=name
        )
    try:
        return ir.serde.deserialize_model(ir.serde.serialize_model(model))
    finally:
        for name, value in model.graph.initializers.items():
            value.const_value = held[name]
