"""The steps every entry point shares: resolve, configure, pick the task, trace (with fallback)."""

from __future__ import annotations

import logging
import os

import torch

from mobius import failures
from mobius.errors import UnsupportedError
from mobius.fallbacks import announce
from mobius.gguf import source as _gguf  # noqa: F401  (registers its reader: sources/readers.py)
from mobius.quant import prequantized as _gptq_awq  # noqa: F401  (registers its reader too)
from mobius.sources import config as config_mod
from mobius.sources import remote_code
from mobius.sources import resolve as source_mod
from mobius.sources.config import ArchitectureConfig
from mobius.sources.resolve import Source
from mobius.sources.safetensors_header import check_layer_count
from mobius.synth.chain import Prepared, length_bound_fallback, trace_with_fallbacks
from mobius.synth.decompose import decompose_unlowered
from mobius.synth.graphs import PreparedGraphs, is_multi_graph, prepare_graphs
from mobius.tasks import Task
from mobius.tasks.detect import get_task
from mobius.tasks.vlm import apply_features
from mobius.tasks.vlm_unsplit import image_path_task, warn_text_only, why_not_split

log = logging.getLogger("mobius")


def prepare(
    src: str | os.PathLike,
    *,
    dtype: torch.dtype,
    task: str | None,
    weights: bool,
    trust_remote_code: bool,
    features: tuple[str, ...] = (),
) -> Prepared | PreparedGraphs:
    """Resolve ``src``, trace it on meta, and fall back to a cache-less trace if attention escapes.

    Only an UnsupportedError (the model cannot be traced this way) moves down the chain;
    interrupts, out-of-memory and mobius's own bugs stop the build (``mobius.failures``)."""
    with failures.phase("reading the checkpoint"):
        source = source_mod.resolve(src, trust_remote_code=trust_remote_code, need_weights=weights)
        if trust_remote_code and remote_code.has_code(source.config):
            hf_config = remote_code.load_config(source.config, source.directory)
        else:
            hf_config = config_mod.hf_config_from_dict(source.config)
        arch = config_mod.from_hf(hf_config)
        the_task = apply_features(get_task(task, arch), features)
        if weights and _stacks_of_layers(the_task, arch):
            # before the trace: a config claiming thousands of layers takes minutes
            check_layer_count(arch, source.tensors)
        warn_text_only(hf_config, source.directory, image_path_task(the_task))
    if is_multi_graph(the_task):  # encoder-decoder: one trace per graph (synth/graphs.py)
        with failures.phase(f"tracing {arch.model_type}"):
            return prepare_graphs(source, arch, the_task, dtype)
    return trace_task(source, arch, the_task, dtype)


def trace_task(
    source: Source, arch: ArchitectureConfig, the_task: Task, dtype: torch.dtype
) -> Prepared:
    """Trace the model ``the_task`` builds for ``arch``, down the fallback chain, announcing
    each fallback taken."""
    log.info("tracing %s as %s on the meta device", arch.model_type, the_task.name)
    with failures.phase(f"tracing {arch.model_type}"):
        try:
            prepared = trace_with_fallbacks(source, arch, the_task, dtype)
        except UnsupportedError as exc:
            _say_why_not_split(exc, arch)
            raise
        failures.stop_checkpoint()
        prepared.traced.program = decompose_unlowered(prepared.traced.program)
    if prepared.traced.length_bounds:
        prepared.fallbacks.append(length_bound_fallback(prepared.traced))
    announce(prepared.fallbacks)
    return prepared


def _stacks_of_layers(task: Task, arch: ArchitectureConfig) -> bool:
    """The config's layer counts are stacks of layers in the checkpoint (text models). A vision
    or audio model's are not: ConvNeXt indexes layers per stage, EfficientNet's
    ``num_hidden_layers`` counts something else (64 for 16 blocks)."""
    modality = getattr(task, "modality", None)
    return modality is None or modality(arch) == "input_ids"


def _say_why_not_split(exc: UnsupportedError, arch: ArchitectureConfig) -> None:
    """A model of the image-text-to-text mapping with no three-graph form whose text path does
    not trace either (Idefics's forward needs pixels, PI0's actions): its error says why the
    image path is not the way out (``tasks/vlm_unsplit.py``)."""
    reason = why_not_split(arch)
    if reason:
        exc.args = (f"{exc}; {reason}",)
