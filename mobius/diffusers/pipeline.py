"""diffusers inputs: a pipeline directory (``model_index.json``) or one model directory.

A pipeline becomes one sub-directory per component (CONTRACTS.md "Diffusers pipelines"): diffusers
models through ``mobius.diffusers.components``, transformers text encoders through the
transformers trace (``mobius.diffusers.text_encoder``), and scheduler, tokenizer and feature
extractor folders copied as they are. A VAE is two graphs, ``vae_encoder/`` and ``vae_decoder/``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch

from mobius.diffusers import shared_modules
from mobius.diffusers.components import (
    component_directory,
    component_tasks,
    diffusers_architecture,
    emit_graph,
    graph_package,
    merged_analysis,
    prepare_graph,
)
from mobius.diffusers.config import class_name, model_class
from mobius.diffusers.package import DirectoryPackage
from mobius.errors import ConfigError
from mobius.output.package import ModelPackage
from mobius.report import ExplainReport
from mobius.sources import resolve as source_mod
from mobius.synth.chain import Prepared

log = logging.getLogger("mobius")

INDEX = "model_index.json"
VAE_GRAPHS = ("vae_encoder", "vae_decoder")


def is_diffusers(src: str | os.PathLike) -> bool:
    """``src`` is a local pipeline directory or a diffusers model directory."""
    path = Path(src).expanduser()
    if path.is_file() and path.name in (INDEX, "config.json"):
        path = path.parent
    return path.is_dir() and ((path / INDEX).is_file() or component_directory(path))


def read_index(directory: Path) -> dict:
    """``model_index.json`` as a dict (checked by ``pipeline_components`` first)."""
    return json.loads((directory / INDEX).read_text(encoding="utf-8"))


def pipeline_components(directory: Path) -> dict[str, tuple[str, str]]:
    """Component name -> (library, class name), as ``model_index.json`` lists them (unset
    components, ``[null, null]``, left out); a broken index or a missing component is refused."""
    from mobius.sources.input_kinds import check_diffusers_pipeline

    return check_diffusers_pipeline(directory)


def _is_model(library: str, cls: str) -> bool:
    """A component holding weights to convert (not a scheduler, tokenizer or processor)."""
    if library == "diffusers":
        return not cls.endswith("Scheduler")
    if library == "transformers":
        return not cls.endswith(("Tokenizer", "TokenizerFast", "Processor", "FeatureExtractor"))
    return False  # a pipeline's own class (safety checker): copied as it is


def chosen_components(
    directory: Path, components: dict[str, tuple[str, str]], component: str | None
) -> list[str]:
    """The components to convert: all, or the one ``--component`` names (``vae_encoder`` and
    ``vae_decoder`` name the ``vae``)."""
    if component is None:
        return list(components)
    chosen = "vae" if component in VAE_GRAPHS else component
    if chosen not in components:
        raise ConfigError(
            f"--component {component}: {directory / INDEX} has no such component; "
            f"its components: {', '.join(components)}"
        )
    return [chosen]


def _graphs_wanted(name: str, component: str | None) -> tuple[str, ...] | None:
    """For ``--component``: the VAE graphs a name selects (``vae_decoder`` alone), or None."""
    if component in VAE_GRAPHS and name == "vae":
        return (component,)
    return None


def build(
    src: str | os.PathLike,
    *,
    dtype: str = "f32",
    weights: bool = True,
    component: str | None = None,
    trust_remote_code: bool = False,
) -> ModelPackage:
    """Convert a diffusers pipeline or model directory (see the module docstring)."""
    from mobius.convert import parse_dtype

    torch_dtype = parse_dtype(dtype)
    directory = _directory(src)
    if not (directory / INDEX).is_file():  # one model directory
        if component is not None:
            raise ConfigError(
                f"--component needs a pipeline directory ({INDEX}); {src} is one model"
            )
        return _model_package(directory, torch_dtype, dtype, weights, None)
    components = pipeline_components(directory)
    names = chosen_components(directory, components, component)
    parts: dict[str, ModelPackage] = {}
    folders: list[Path] = []
    for name in names:
        library, cls = components[name]
        folder = directory / name  # pipeline_components checked it is there
        if not _is_model(library, cls):
            folders.append(folder)
            continue
        log.info("converting %s (%s)", name, cls)
        if library == "transformers":
            from mobius.diffusers.text_encoder import text_encoder_package

            parts[name] = text_encoder_package(
                folder, cls, torch_dtype, dtype, weights, trust_remote_code
            )
        else:
            package = _model_package(
                folder, torch_dtype, dtype, weights, name, _graphs_wanted(name, component)
            )
            if isinstance(package, DirectoryPackage):
                parts.update(package.parts)  # vae -> vae_encoder/, vae_decoder/
            else:
                parts[name] = package
    if component is not None and len(parts) == 1 and not folders:
        return next(iter(parts.values()))  # the component alone, at the top of the output
    package = DirectoryPackage(model=None, parts=parts, folders=folders)
    package.extra_files = [directory / INDEX]
    package.texts = {"mobius.json": json.dumps(_manifest(read_index(directory), package), indent=2)}
    return package


def _manifest(index: dict, package: DirectoryPackage) -> dict:
    return {
        "library": "diffusers",
        "pipeline": index.get("_class_name"),
        "components": sorted(package.parts),
        "graphs": {
            file: {
                "inputs": [v.name for v in model.graph.inputs],
                "outputs": [v.name for v in model.graph.outputs],
            }
            for file, model in package.graphs().items()
        },
    }


def _directory(src: str | os.PathLike) -> Path:
    path = Path(src).expanduser()
    if path.is_file():
        path = path.parent
    return path.resolve()


def _model_package(
    directory: Path,
    torch_dtype: torch.dtype,
    dtype: str,
    weights: bool,
    component: str | None,
    wanted: tuple[str, ...] | None = None,
) -> ModelPackage:
    """One diffusers model: a package with ``model.onnx`` at its top, or (a VAE) a directory
    package with one sub-directory per graph."""
    check_class(directory)
    source = source_mod.resolve(directory, need_weights=weights)
    shared_modules.join(source, directory)  # a ControlNet on its transformer's modules
    arch = diffusers_architecture(source)
    tasks = [t for t in component_tasks(arch.model_type) if wanted is None or t.name in wanted]
    tasks = [t for t in tasks if t.supports(arch)]  # a bank's scales: those its config holds
    packages = {}
    for task in tasks:
        prepared = prepare_graph(source, arch, task, torch_dtype)
        model, report = emit_graph(prepared, weights=weights, src=str(directory))
        packages[task.name] = graph_package(
            model, report, prepared, dtype=dtype, component=component or task.name
        )
    if len(packages) == 1:
        return next(iter(packages.values()))
    return DirectoryPackage(model=None, parts=packages)


def check_class(directory: Path) -> None:
    """Refuse a model directory whose ``config.json`` names no diffusers class diffusers has
    (before its weights are looked for)."""
    config = source_mod.read_config(directory)
    name = class_name(config)
    if name is None:
        raise ConfigError(
            f"{directory / 'config.json'} has no '_class_name': it describes no diffusers model"
        )
    model_class(name)


def explain(src: str | os.PathLike, *, component: str | None = None) -> ExplainReport:
    """What every module of a diffusers model or pipeline becomes (config only, no weights)."""
    directory = _directory(src)
    parts: dict[str, Prepared] = {}
    if (directory / INDEX).is_file():
        components = pipeline_components(directory)
        folders = {
            n: directory / n
            for n in chosen_components(directory, components, component)
            if _is_model(*components[n])
        }
        model_type = read_index(directory).get("_class_name") or "pipeline"
    else:
        folders, model_type, components = {"": directory}, None, {}
    for name, folder in folders.items():
        library = components[name][0] if name else "diffusers"
        if library == "transformers":
            from mobius.diffusers.text_encoder import prepare_text_encoder

            source = source_mod.resolve(folder, need_weights=False)
            parts[name] = prepare_text_encoder(source, components[name][1], torch.float32)
            continue
        check_class(folder)
        source = source_mod.resolve(folder, need_weights=False)
        shared_modules.join(source, folder)
        arch = diffusers_architecture(source)
        model_type = model_type or arch.model_type
        for task in component_tasks(arch.model_type):
            if _graphs_wanted(name, component) not in (None, (task.name,)):
                continue
            if not task.supports(arch):  # a scale the bank does not hold
                continue
            key = task.name if name in ("", "vae", task.name) else f"{name}.{task.name}"
            parts[key] = prepare_graph(source, arch, task, torch.float32)
    analysis = merged_analysis(parts, model_type or "diffusers", "diffusers")
    return ExplainReport.from_analysis(analysis, source=str(src))
