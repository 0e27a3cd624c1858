"""The synthesis driver: config -> task -> trace -> emit -> bind weights -> ModelPackage."""

from __future__ import annotations

import json
import logging
import os
import shlex
import time

import torch

from mobius.errors import ConfigError, UnsupportedError
from mobius.package import ModelPackage
from mobius.report import ExplainReport
from mobius.synth.analysis import analyze
from mobius.synth.emit import emit
from mobius.synth.graphs import PreparedGraphs, build_graphs
from mobius.synth.prepare import prepare
from mobius.synth.token_loop import loop_over_tokens
from mobius.weights import Checkpoint, WeightBinder

log = logging.getLogger("mobius")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ConfigError(f"unknown dtype '{name}'; choose one of: {', '.join(DTYPES)}") from None


def build(
    src: str | os.PathLike,
    *,
    dtype: str = "f32",
    task: str | None = None,
    weights: bool = True,
    trust_remote_code: bool = False,
) -> ModelPackage:
    """Convert a checkpoint (local directory or hub id) into a ModelPackage."""
    torch_dtype = parse_dtype(dtype)
    started = time.perf_counter()
    prepared = prepare(
        src, dtype=torch_dtype, task=task, weights=weights, trust_remote_code=trust_remote_code
    )
    if isinstance(prepared, PreparedGraphs):  # encoder-decoder: several graphs
        return build_graphs(prepared, src=str(src), dtype=dtype, weights=weights, task=task)
    source, arch, the_task, traced, use_cache = (
        prepared.source,
        prepared.arch,
        prepared.task,
        prepared.traced,
        prepared.use_cache,
    )
    report = ExplainReport.from_analysis(analyze(prepared), source=str(src))
    if report.summary.unsupported_ops:
        raise UnsupportedError(_blocked_message(report, src, task))
    checkpoint = Checkpoint(source.tensors) if weights else None
    binder = WeightBinder(
        checkpoint,
        buffer_values=traced.buffer_values,
        tied_names=traced.tied_names,
        key_to_param=traced.key_to_param,
        constants=traced.constant_values,
    )
    try:
        captured_cache = use_cache and not traced.cache_in_graph  # else the trace has its states
        model = emit(traced, binder, name=arch.model_type, use_cache=captured_cache)
        if traced.loop_inputs:
            model = loop_over_tokens(model, traced.loop_inputs, traced.inputs)
    except UnsupportedError as exc:
        if not str(exc).startswith("no lowering for"):
            raise
        raise UnsupportedError(f"{exc}; full report: {_explain_command(src, task)}") from exc
    unused = binder.unused_keys()
    if unused:
        shown = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        log.warning("the checkpoint has %d tensors the model does not use: %s", len(unused), shown)
    model.metadata_props.update(
        {"mobius.model_type": arch.model_type, "mobius.task": the_task.name, "mobius.dtype": dtype}
    )
    log.info("built %d nodes in %.1f s", len(model.graph), time.perf_counter() - started)
    texts = {
        "mobius.json": json.dumps(
            {
                "model_type": arch.model_type,
                "task": the_task.name,
                "dtype": dtype,
                "kv_cache": use_cache,
                "inputs": [v.name for v in model.graph.inputs],
                "outputs": [v.name for v in model.graph.outputs],
            },
            indent=2,
        ),
        "explain.json": report.to_json(),
    }
    extra = [source.config_path, *source.extra_files()]
    return ModelPackage(model=model, extra_files=extra, texts=texts)


def _explain_command(src: str | os.PathLike, task: str | None) -> str:
    task_flag = f" --task {shlex.quote(task)}" if task else ""
    return f"mobius explain --model {shlex.quote(str(src))}{task_flag}"


def _blocked_message(report: ExplainReport, src: str | os.PathLike, task: str | None) -> str:
    """Which ops stop the build, where, and the command that prints the whole report."""
    from mobius.report.paths import describe

    ops = "; ".join(
        f"{op} (in {describe(mods, limit=3)})"
        for op, mods in report.summary.unsupported_ops.items()
    )
    return f"no lowering for: {ops}; for the full report run: {_explain_command(src, task)}"
