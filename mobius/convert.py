"""The build driver: source -> config -> task -> trace -> emit -> bind weights, then the EP
rewrite and quantization -> ModelPackage, with its explain report and ``mobius.json``.

It sits above ``report`` and ``synth`` (and everything they use); ``mobius.build`` calls it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import time

import onnx_ir as ir
import torch

from mobius import failures, fallbacks
from mobius.ep.rewrite import apply as apply_ep
from mobius.ep.rewrite import record as record_ep
from mobius.ep.stored_weights import STORED_LAYOUT_EPS, use_stored_weights
from mobius.errors import ConfigError, UnsupportedError, WeightsError
from mobius.gguf.linears import place_gguf_blocks
from mobius.graph_cache.apply import GraphOnly, apply_weights
from mobius.lora.fold import AdapterFold
from mobius.lora.inputs import LORA_GRAPH, add_lora_inputs
from mobius.lora.peft_adapter import PeftAdapter
from mobius.output.package import MODEL_FILE, ModelPackage, graph_names
from mobius.output.weights import Checkpoint
from mobius.quant.linears import QuantOptions, quantize_linears
from mobius.quant.nbits_cpu import fast_cpu_forms
from mobius.quant.nbits_pack import pack_matmulnbits
from mobius.quant.prequantized import place_prequantized
from mobius.report import ExplainReport
from mobius.report.paths import describe
from mobius.report.weights import WeightScheme, weight_schemes
from mobius.report.weights import to_json as weights_json
from mobius.runtime.genai import genai_files
from mobius.sources import remote_code
from mobius.synth.analysis import analyze, analyze_graphs
from mobius.synth.chain import Prepared
from mobius.synth.emit import emit
from mobius.synth.graphs import PreparedGraphs
from mobius.synth.prepare import prepare
from mobius.synth.token_loop import loop_over_tokens
from mobius.tasks.detect import saved_head

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
    strict: bool = False,
    quantization: QuantOptions | None = None,
    ep: str | None = None,
    features: tuple[str, ...] = (),
    accuracy_level: int = 0,
    adapter: PeftAdapter | None = None,
    lora_inputs: tuple[str, ...] = (),
) -> ModelPackage:
    """Convert a checkpoint (local directory or hub id) into a ModelPackage; with ``strict``,
    a fallback (fused components or the KV cache lost) is a StrictError instead. ``ep`` tunes
    the graph for an execution provider (``mobius/ep/``). ``adapter``: a LoRA adapter folded into
    the weights as they are written (``mobius.lora.fold``); ``lora_inputs``: module names
    (or ``all-linear``) whose linears take LoRA factors as graph inputs (``mobius.lora.inputs``)."""
    torch_dtype = parse_dtype(dtype)
    # checked as for a build with weights: a graph-only build keeps it for apply_weights
    scheme = quantization.check(dtype) if quantization is not None else None
    started = time.perf_counter()
    prepared = prepare(
        src,
        dtype=torch_dtype,
        task=task,
        weights=weights,
        trust_remote_code=trust_remote_code,
        features=features,
    )
    if isinstance(prepared, PreparedGraphs):  # several graphs: encoder-decoder, vision-language
        if lora_inputs and LORA_GRAPH not in prepared.graphs:
            raise UnsupportedError(
                f"--lora-inputs is not supported for {prepared.task.name} models yet "
                f"(one-graph models and the {LORA_GRAPH} graph of several); fold an adapter "
                "with --adapter instead"
            )
        if scheme is not None:
            raise UnsupportedError(
                f"--precision is not supported for {prepared.task.name} models yet; "
                "build without it (f32 or f16)"
            )
        if ep not in (None, "cpu"):
            raise UnsupportedError(
                f"--ep {ep} is not supported for {prepared.task.name} models yet; the graphs "
                "are the portable ones (build without --ep, or with --ep cpu)"
            )

    def made(prepared: Prepared | PreparedGraphs, src: str, bound: bool) -> ModelPackage:
        """The package of ``prepared``: with its source's weights (``bound``), else the graph
        only (parameters as inputs, nothing quantized)."""
        if isinstance(prepared, PreparedGraphs):
            return build_graphs(
                prepared,
                src=src,
                dtype=dtype,
                weights=bound,
                task=task,
                strict=strict,
                adapter=adapter,
                lora_inputs=lora_inputs,
            )
        return package(
            prepared,
            src=src,
            report_hint=_explain_command(src, task),
            dtype=dtype,
            weights=bound,
            strict=strict,
            quantization=quantization if bound else None,
            scheme=scheme if bound else None,
            ep=ep,
            accuracy_level=accuracy_level,
            started=started,
            adapter=adapter,
            lora_inputs=lora_inputs,
        )

    result = made(prepared, str(src), weights)
    if weights:
        result.weights_applier = apply_weights
    else:  # apply_weights emits the kept trace again, bound to a checkpoint (no new trace)
        if scheme is not None:
            log.info("graph only: --precision applies with the weights (apply_weights)")
        result.weights_applier = GraphOnly(
            lambda source, src: made(dataclasses.replace(prepared, source=source), src, True)
        )
    return result


def package(
    prepared: Prepared,
    *,
    src: str,
    report_hint: str,
    dtype: str,
    weights: bool,
    strict: bool,
    quantization: QuantOptions | None,
    scheme: object,
    ep: str | None,
    accuracy_level: int,
    started: float,
    extra_files: list | None = None,
    adapter: PeftAdapter | None = None,
    lora_inputs: tuple[str, ...] = (),
) -> ModelPackage:
    """Match, emit, bind the weights and write the texts of one traced graph: what every way in
    (a checkpoint, ``build_module``'s nn.Module) shares. ``report_hint`` says how to get the
    full explain report (in errors); ``extra_files`` travel with the graph (None: the
    checkpoint's config and tokenizer files); ``adapter`` and ``lora_inputs`` as for ``build``."""
    if strict:
        fallbacks.refuse(prepared.fallbacks)
    if ep not in (None, "cpu") and prepared.source.checkpoint is not None:
        raise UnsupportedError(
            f"--ep {ep} is not supported yet for a checkpoint whose weights are already quantized "
            "(GGUF, GPTQ, AWQ): its packed attention weights would lose the quantized blocks"
        )
    source, arch, the_task, traced, use_cache = (
        prepared.source,
        prepared.arch,
        prepared.task,
        prepared.traced,
        prepared.use_cache,
    )
    with failures.phase(f"matching patterns in {arch.model_type}"):
        report = ExplainReport.from_analysis(analyze(prepared), source=src)
    if report.summary.unsupported_ops:
        raise UnsupportedError(_blocked_message(report, src, None, report_hint))
    checkpoint = (source.checkpoint or Checkpoint(source.tensors)) if weights else None
    binder = traced.binder(checkpoint)
    folding = lora_fold(adapter, source, binder)
    try:
        captured_cache = use_cache and not traced.cache_in_graph  # else the trace has its states
        with failures.phase(f"emitting ONNX for {arch.model_type}"):
            model = emit(traced, binder, name=arch.model_type, use_cache=captured_cache)
            if traced.loop_inputs:
                model = loop_over_tokens(model, traced.loop_inputs, traced.inputs)
        failures.stop_checkpoint()
        if folding is not None:
            folding.check_used()
        lora_graph = (
            add_lora_inputs(model, lora_inputs, dtype, binder.param_to_key) if lora_inputs else None
        )
    except UnsupportedError as exc:
        if not str(exc).startswith("no lowering for"):
            raise
        raise UnsupportedError(f"{exc}; full report: {report_hint}") from exc
    except WeightsError as exc:
        saved = saved_head(arch, the_task)
        raise (WeightsError(f"{exc}; {saved}") if saved else exc) from exc
    # old checkpoints also saved buffers that are no longer persistent (BERT's position_ids):
    # transformers recomputes them, and so does the graph
    unused = [k for k in binder.unused_keys() if k not in traced.buffer_values]
    if unused:
        shown = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        log.warning("the checkpoint has %d tensors the model does not use: %s", len(unused), shown)
    ep_report = (
        apply_ep(
            model,
            ep,
            arch.hf_config,
            dtype,
            pack=source.checkpoint is None,
            quantized=scheme is not None,
        )
        if the_task.supports_cache
        else None
    )
    gguf = place_gguf_blocks(model, checkpoint, dtype, accuracy_level)
    prequantized = place_prequantized(model, checkpoint, dtype, accuracy_level)
    quantized = quantize_linears(model, scheme, quantization.exclude) if scheme else None
    packed = pack_matmulnbits(model) if ep == "cpu" else []
    if ep_report is not None and ep in STORED_LAYOUT_EPS:
        ep_report.stored_weights = use_stored_weights(model)
    cpu_forms = fast_cpu_forms(model) if ep in (None, "cpu") else {}
    if gguf:
        gguf.note_forms(cpu_forms)
    schemes = weight_schemes(model)
    report.weights = weights_json(schemes)
    record_sources(model, schemes)
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
                "graphs": {MODEL_FILE: graph_names(model)},
                **labels(prepared),
                **remote_code.record(arch.hf_config, the_task.mapping),
                "fallbacks": [f.to_dict() for f in prepared.fallbacks],
                **({"quantization": quantized.to_json()} if quantized else {}),
                **({"matmulnbits_packed": packed} if packed else {}),
                **({"matmulnbits_cpu_forms": cpu_forms} if cpu_forms else {}),
                **({"gguf": gguf.to_json()} if gguf else {}),
                **({"prequantized": prequantized.to_json()} if prequantized else {}),
                **({"lora": folding.to_json()} if folding is not None else {}),
                **({"lora_inputs": lora_graph.to_json()} if lora_graph is not None else {}),
                "weights": report.weights,
            },
            indent=2,
        ),
        "explain.json": report.to_json(),
    }
    if the_task.supports_cache and use_cache:
        texts.update(genai_files(model, arch.hf_config, source.directory))
    record_ep(ep_report, report, texts)
    extra = [source.config_path, *source.extra_files()] if extra_files is None else extra_files
    return ModelPackage(model=model, extra_files=extra, texts=texts)


def lora_fold(adapter: PeftAdapter | None, source, binder) -> AdapterFold | None:
    """Attach ``adapter``'s folds to ``binder`` (None without an adapter); refused for a base
    whose weights are already quantized (GGUF, GPTQ, AWQ) or for a graph-only build."""
    if adapter is None:
        return None
    if source.checkpoint is not None:
        raise UnsupportedError(
            "--adapter needs a float safetensors base; this checkpoint's weights are already "
            "quantized (GGUF, GPTQ, AWQ)"
        )
    if binder.checkpoint is None:
        raise UnsupportedError(
            "--adapter folds into the weights; it does not apply with --no-weights"
        )
    folding = AdapterFold(adapter)
    folding.attach(binder)
    return folding


def record_sources(model: ir.Model, schemes: list[WeightScheme]) -> None:
    """``mobius.weight_sources`` again, once packing and quantization have renamed initializers:
    each stored weight (a quantized one by its packed data; its scales and zero points are parts
    of it) -> its checkpoint key(s), where they differ; the emitted graph's entries are stale."""
    sources = {s.name: s.source for s in schemes if s.source != s.name}
    if sources:
        model.metadata_props["mobius.weight_sources"] = json.dumps(
            sources, sort_keys=True, separators=(",", ":")
        )
    else:
        model.metadata_props.pop("mobius.weight_sources", None)


def labels(prepared: Prepared) -> dict[str, dict[str, str]]:
    """``{"id2label": ...}`` where config.json has one, or where the task's outputs are scores
    over labels (then the config's, which the logits' width follows); else nothing."""
    raw = prepared.source.config.get("id2label")
    if raw is None and prepared.task.classifies:
        raw = prepared.arch.hf_config.id2label
    if not isinstance(raw, dict):
        return {}
    return {"id2label": {str(k): str(v) for k, v in raw.items()}}


def _explain_command(src: str | os.PathLike, task: str | None) -> str:
    task_flag = f" --task {shlex.quote(task)}" if task else ""
    return f"mobius explain --model {shlex.quote(str(src))}{task_flag}"


def _blocked_message(
    report: ExplainReport, src: str | os.PathLike, task: str | None, report_hint: str | None = None
) -> str:
    """Which ops stop the build, where, and the command that prints the whole report (or
    ``report_hint``, where the command is another)."""
    ops = "; ".join(
        f"{op} (in {describe(mods, limit=3)})"
        for op, mods in report.summary.unsupported_ops.items()
    )
    hint = report_hint or _explain_command(src, task)
    return f"no lowering for: {ops}; for the full report run: {hint}"


def build_graphs(
    prepared: PreparedGraphs,
    *,
    src: str,
    dtype: str,
    weights: bool,
    task: str | None,
    strict: bool = False,
    adapter: PeftAdapter | None = None,
    lora_inputs: tuple[str, ...] = (),
) -> ModelPackage:
    """Emit and bind every graph; one ModelPackage with ``<graph>.onnx`` for each. With
    ``strict``, any graph's fallback is refused (``fallbacks.refuse``); ``adapter`` is folded
    into every graph's weights (``mobius.lora.fold``); ``lora_inputs`` go to the
    ``decoder_model`` graph only (``mobius.lora.inputs``).

    Each graph binds its own subset of the checkpoint; a tensor both graphs read (T5's shared
    embedding) is written into each graph's data file."""
    if strict:
        fallbacks.refuse([f for part in prepared.graphs.values() for f in part.fallbacks])

    report = ExplainReport.from_analysis(analyze_graphs(prepared), source=str(src))
    if report.summary.unsupported_ops:
        raise UnsupportedError(_blocked_message(report, src, task))
    checkpoint = Checkpoint(prepared.source.tensors) if weights else None
    models, unused, folding, lora_graph = {}, None, None, None
    for name, part in prepared.graphs.items():
        traced = part.traced
        binder = traced.binder(checkpoint)
        if folding is not None:  # one fold for the build: a target may be in any graph
            folding.attach(binder)
        else:
            folding = lora_fold(adapter, prepared.source, binder)
        captured_cache = part.use_cache and not traced.cache_in_graph
        model = emit(
            traced, binder, name=f"{prepared.arch.model_type}_{name}", use_cache=captured_cache
        )
        if traced.loop_inputs:
            invariant = getattr(part.task, "loop_invariant", lambda _: set())(traced.inputs)
            model = loop_over_tokens(model, traced.loop_inputs, traced.inputs, invariant)
        if lora_inputs and name == LORA_GRAPH:
            lora_graph = add_lora_inputs(model, lora_inputs, dtype, binder.param_to_key)
        model.metadata_props.update(
            {
                "mobius.model_type": prepared.arch.model_type,
                "mobius.task": prepared.task.name,
                "mobius.graph": name,
                "mobius.dtype": dtype,
            }
        )
        left = set(binder.unused_keys())
        unused = left if unused is None else unused & left
        models[name] = model
    if folding is not None:
        folding.check_used()
    if unused:
        shown = ", ".join(sorted(unused)[:5])
        log.warning("the checkpoint has %d tensors no graph uses: %s", len(unused), shown)
    manifest = {
        "model_type": prepared.arch.model_type,
        "task": prepared.task.name,
        "dtype": dtype,
        "kv_cache": True,
        "graphs": {
            f"{name}.onnx": {
                "inputs": [v.name for v in m.graph.inputs],
                "outputs": [v.name for v in m.graph.outputs],
            }
            for name, m in models.items()
        },
        **prepared.task.manifest(prepared.arch),
        **({"lora": folding.to_json()} if folding is not None else {}),
        **({"lora_inputs": lora_graph.to_json()} if lora_graph is not None else {}),
    }
    fallen = [f.to_dict() for part in prepared.graphs.values() for f in part.fallbacks]
    if fallen:
        manifest["fallbacks"] = fallen
    runtime, note = {}, None
    runtime_files = getattr(prepared.task, "runtime_files", None)  # genai_config.json (VLMs)
    if runtime_files is not None:
        runtime, note = runtime_files(models, prepared.arch, prepared.source.directory)
    if note:
        log.info("no genai_config.json: %s", note)
        manifest["genai"] = f"no genai_config.json: {note}"
    stored = {s.name: s for m in models.values() for s in weight_schemes(m)}  # shared: once
    report.weights = manifest["weights"] = weights_json(list(stored.values()))
    texts = {
        "mobius.json": json.dumps(manifest, indent=2),
        "explain.json": report.to_json(),
        **runtime,
    }
    extra = [prepared.source.config_path, *prepared.source.extra_files()]
    return ModelPackage(model=None, models=models, extra_files=extra, texts=texts)
