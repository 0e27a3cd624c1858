"""Which graphs each diffusers model class converts to, and one graph's trace -> emit path.

A component is traced, matched and emitted exactly like a transformers model (``Prepared`` ->
``analyze`` -> ``emit``); only the construction differs (``mobius.diffusers.trace``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import onnx_ir as ir
import torch

from mobius import failures
from mobius.diffusers import argument_rules, protein_args, structured_args
from mobius.diffusers import tasks as dt
from mobius.diffusers.config import architecture, class_name, model_class
from mobius.errors import ConfigError, UnsupportedError
from mobius.fallbacks import announce
from mobius.findings import Analysis, ModuleAnalysis
from mobius.output.package import MODEL_FILE, ModelPackage
from mobius.report import ExplainReport
from mobius.sources.config import ArchitectureConfig
from mobius.sources.resolve import Source
from mobius.synth.analysis import analyze
from mobius.synth.chain import Prepared, length_bound_fallback
from mobius.synth.decompose import decompose_unlowered
from mobius.synth.graphs import _drop_dead_code
from mobius.synth.trace import SpecialisedShapeError
from mobius.tasks import Task

log = logging.getLogger("mobius")

# VAEs whose encoder gives latents, not a distribution's parameters (CONTRACTS.md)
PLAIN_LATENT_VAES = ("AutoencoderTiny", "AutoencoderDC", "VQModel")


def component_tasks(name: str) -> list[Task]:
    """The graphs of diffusers model class ``name``, each a Task named as its directory."""
    from mobius.diffusers.audio_args import audio_ruled, audio_tasks
    from mobius.diffusers.caption_decoder import caption_tasks
    from mobius.diffusers.far_chunks import FAR, chunk_tasks
    from mobius.diffusers.generic import forward_task
    from mobius.diffusers.reference_cache import cache_mode_tasks
    from mobius.diffusers.sampling import sampling_tasks
    from mobius.diffusers.tiled_vae import TILED_VAES, tiled_vae_tasks
    from mobius.diffusers.transformers2d import transformer_task
    from mobius.diffusers.upscaler_bank import bank_tasks

    cls = model_class(name)
    if (bank := bank_tasks(name)) is not None:  # one graph per scale (each config's: supports)
        return bank
    if (modes := cache_mode_tasks(name)) is not None:  # one graph per kv_cache_mode
        return modes
    if name == FAR:  # AnyFlow FAR: its forward over the whole video, and the chunk loop's calls
        return [forward_task(cls), *chunk_tasks()]
    if (captions := caption_tasks(name, cls)) is not None:  # its forward and its caption step
        return captions
    if audio_ruled(name):  # its latents are audio: the transformer table would read an image
        return [forward_task(cls)]
    if (audio := audio_tasks(name, cls)) is not None:
        return audio
    if (sampling := sampling_tasks(name, cls)) is not None:
        return sampling
    if name == protein_args.AUTOENCODER:  # a molecule's atoms in, latents sampled from noise
        return protein_args.autoencoder_tasks()
    if structured_args.structured(cls):  # lists or dicts of tensors: the generic contract
        return [forward_task(cls)]
    if name == "AutoencoderKLTemporalDecoder":  # decode folds frames: unfolded clips
        from mobius.diffusers.folded_frames import temporal_decoder_tasks

        return temporal_decoder_tasks(cls)
    if name in TILED_VAES:  # tiled over a grid that Python loops count: one grid per graph
        return tiled_vae_tasks(cls)
    if name in PLAIN_LATENT_VAES:
        return list(dt.vae_tasks("latents", cls))
    if name.startswith("Autoencoder") or (hasattr(cls, "encode") and hasattr(cls, "decode")):
        return list(dt.vae_tasks(cls=cls))
    if name.startswith("UNet2DCondition"):
        return [dt.UNET_CONDITION]
    if name == "UNet2DModel":
        return [dt.UNET]
    if name.startswith("ControlNet"):
        from mobius.diffusers.transformers2d import CONTROLNET

        return [CONTROLNET]
    if argument_rules.ruled(cls):  # arguments beyond the transformer table: the generic contract
        return [forward_task(cls)]
    try:
        return [transformer_task(cls)]
    except UnsupportedError:  # an argument outside the transformer table: the class's forward
        return [forward_task(cls)]


@dataclass
class GraphResult:
    """One emitted graph and what the report and manifest need of it."""

    name: str
    model: ir.Model | None  # None when only explaining
    prepared: Prepared


def prepare_graph(
    source: Source, arch: ArchitectureConfig, task: Task, dtype: torch.dtype
) -> Prepared:
    """Trace one graph of a diffusers component on meta, ready to match and emit."""
    from mobius.diffusers.trace import trace_component

    log.info("tracing %s's %s on the meta device", arch.model_type, task.name)
    with failures.phase(f"tracing {arch.model_type}"):
        try:
            traced = trace_component(arch, task, dtype)
        except UnsupportedError as exc:
            if isinstance(exc, SpecialisedShapeError) and getattr(exc, "axes", None) == {dt.FRAMES}:
                # a Python loop over the frames (causal video VAEs decode frame by frame with a
                # cache) or a branch on their count: one frame count per graph, batch, height
                # and width stay dynamic
                frames = dt.EXAMPLE_SIZES[dt.FRAMES]
                log.warning("%s's %s: num_frames fixed to %d (%s)", arch.model_type, task.name,
                            frames, exc)  # fmt: skip
                retrace = dt.fixed_axes(task, arch, {dt.FRAMES: frames})
            else:
                fixed = dt.fixed_size(task, arch)
                if fixed is None:
                    raise
                # DiT-style unpatchifying takes the square root of the token count in Python
                log.warning(
                    "%s: height and width fixed to the config's sample_size %s (the dynamic "
                    "trace failed: %s)", arch.model_type, arch.hf_config.get("sample_size"), exc,
                )  # fmt: skip
                retrace = fixed
            traced = trace_component(arch, retrace, dtype)
        # e.g. the latent distribution's unused std; in-place writes into live tensors stay
        # (diffusers' rotary embeddings fill ``empty_like`` by slices)
        _drop_dead_code(traced.program)
        traced.program = decompose_unlowered(traced.program)
    prepared = Prepared(source, arch, task, traced, use_cache=False)
    if traced.length_bounds:
        prepared.fallbacks.append(length_bound_fallback(traced))
        announce(prepared.fallbacks[-1:])
    return prepared


def emit_graph(prepared: Prepared, *, weights: bool, src: str) -> tuple[ir.Model, ExplainReport]:
    """Match, emit and bind one traced graph (the same steps as ``mobius.convert``)."""
    from mobius.convert import _blocked_message
    from mobius.output.weights import Checkpoint
    from mobius.synth.emit import emit

    arch, task, traced = prepared.arch, prepared.task, prepared.traced
    with failures.phase(f"matching patterns in {arch.model_type}"):
        report = ExplainReport.from_analysis(analyze(prepared), source=src)
    if report.summary.unsupported_ops:
        raise UnsupportedError(_blocked_message(report, src, None))
    checkpoint = Checkpoint(prepared.source.tensors) if weights else None
    binder = traced.binder(checkpoint)
    with failures.phase(f"emitting ONNX for {arch.model_type}"):
        model = emit(traced, binder, name=f"{arch.model_type}_{task.name}")
    failures.stop_checkpoint()
    unused = [k for k in binder.unused_keys() if k not in traced.buffer_values]
    if unused and task.name not in ("vae_encoder", "vae_decoder"):  # a VAE graph reads half
        log.warning("the checkpoint has %d tensors %s does not use: %s", len(unused), task.name,
                    ", ".join(unused[:5]))  # fmt: skip
    model.metadata_props.update({"mobius.model_type": arch.model_type, "mobius.task": task.name})
    return model, report


def graph_package(
    model: ir.Model, report: ExplainReport, prepared: Prepared, *, dtype: str, component: str
) -> ModelPackage:
    """A directory's worth for one graph: ``model.onnx``, ``mobius.json``, ``explain.json`` and
    the component's ``config.json``."""
    manifest = {
        "model_type": prepared.arch.model_type,
        "library": "diffusers" if class_name(prepared.source.config) else "transformers",
        "component": component,
        "task": prepared.task.name,
        "dtype": dtype,
        "kv_cache": False,
        "graphs": {
            MODEL_FILE: {
                "inputs": [v.name for v in model.graph.inputs],
                "outputs": [v.name for v in model.graph.outputs],
            }
        },
        "fallbacks": [f.to_dict() for f in prepared.fallbacks],
    }
    texts = {"mobius.json": json.dumps(manifest, indent=2), "explain.json": report.to_json()}
    extra = [prepared.source.config_path, *prepared.source.extra_files()]
    return ModelPackage(model=model, extra_files=[p for p in extra if p.is_file()], texts=texts)


def diffusers_architecture(source: Source) -> ArchitectureConfig:
    name = class_name(source.config)
    if name is None:
        raise ConfigError(f"{source.config_path} has no '_class_name'; it is no diffusers config")
    model_class(name)  # an unknown class is refused before tracing
    return architecture(source.config)


def merged_analysis(parts: dict[str, Prepared], model_type: str, task: str) -> Analysis:
    """One Analysis for several graphs: each graph's modules under the graph's name."""
    modules = [ModuleAnalysis("", "<model>")]
    for name, part in parts.items():
        for module in analyze(part).modules:
            if not (module.nodes or module.components or module.blocked_ops):
                continue
            path = f"{name}.{module.path}" if module.path else name
            cls = module.cls if module.path else "<graph>"
            modules.append(replace(module, path=path, cls=cls))
    return Analysis(
        model_type=model_type,
        task=task,
        kv_cache=False,
        cache_supported=False,
        unclaimed_attention=[],
        modules=modules,
    )


def component_directory(path: Path) -> bool:
    """``path`` holds one diffusers model (a ``config.json`` naming its ``_class_name``)."""
    config = path / "config.json"
    if not config.is_file():
        return False
    try:
        return class_name(json.loads(config.read_text(encoding="utf-8"))) is not None
    except (OSError, ValueError, AttributeError):
        return False
