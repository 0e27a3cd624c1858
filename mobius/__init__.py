"""mobius: turn a HuggingFace checkpoint into a ready-to-run ONNX model in one call."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from mobius.errors import MobiusError, UnsupportedError

if TYPE_CHECKING:
    import torch

    from mobius.output.package import ModelPackage
    from mobius.report import ExplainReport
    from mobius.verification import VerifyReport

__version__ = "0.1.0"
__all__ = [
    "ExplainReport",
    "MobiusError",
    "ModelPackage",
    "VerifyReport",
    "build",
    "build_module",
    "explain",
    "explain_module",
    "verify",
]


def build(
    src: str | os.PathLike,
    *,
    dtype: str | None = None,
    task: str | None = None,
    weights: bool = True,
    trust_remote_code: bool = False,
    strict: bool = False,
    ep: str | None = None,
    precision: str | None = None,
    block_size: int = 32,
    symmetric: bool = False,
    accuracy_level: int | None = None,
    quant_exclude: Sequence[str] = (),
    component: str | None = None,
    features: Sequence[str] = (),
    adapter: str | os.PathLike | None = None,
    lora_inputs: str | None = None,
) -> ModelPackage:
    """Convert ``src`` (a local checkpoint directory or a hub id) to ONNX.

    Args:
        src: directory holding ``config.json`` and ``*.safetensors``, a ``.gguf`` file (its
            quantized blocks kept where MatMulNBits holds them), or a HuggingFace hub id.
        dtype: ``"f32"``, ``"f16"`` or ``"bf16"``; weights are cast while they are written.
            None: f16 for the GPU execution providers, else f32.
        task: the I/O contract (``"text-generation"``, ``"fill-mask"``, ...: ``mobius.tasks.TASKS``); detected when None.
        weights: False builds the graph only; parameters then become named graph inputs.
        trust_remote_code: allow checkpoints whose config points at their own Python code.
        precision: ``"int4"`` or ``"int8"`` quantizes every linear weight (round to nearest, per
            block along K) into ``com.microsoft`` ``MatMulNBits``; None keeps ``dtype``.
        block_size: weights per scale (a power of two, at least 16).
        symmetric: no zero points (asymmetric, the default, stores one per block).
        accuracy_level: MatMulNBits' compute type: 0 the activation's, 4 int8 (fastest on CPU);
            also for the blocks a GGUF file's weights keep. None: 4 for ``precision`` with
            ``ep="cpu"``, else 0 (``mobius.quant.linears.default_accuracy_level``).
        quant_exclude: globs over module paths (``lm_head``, ``*.mlp.down_proj``) kept in float.
        ep: ``"cpu"``, ``"cuda"``, ``"dml"`` or ``"webgpu"``: tune the graph for that execution
            provider (GroupQueryAttention and SkipSimplifiedLayerNormalization on the GPU ones);
            None: the portable graph.
        component: for a diffusers pipeline directory (``model_index.json``), convert only this
            component (``unet``, ``vae``, ``vae_decoder``, ``text_encoder``, ...).
        features: optional parts of the task: ``text-only`` builds an image-text-to-text
            model's decoder alone, taking ``input_ids``.
        adapter: a PEFT LoRA adapter directory (``adapter_config.json`` +
            ``adapter_model.safetensors``) folded into the weights as they are written:
            ``W + B @ A * alpha / r`` (``alpha / sqrt(r)`` with rslora), before any quantization.
        lora_inputs: ``"all-linear"`` or a comma list of module names (``"q_proj,v_proj"``):
            those linears take LoRA factors as graph inputs (``<path>.lora_A.weight``,
            ``<path>.lora_B.weight``), empty by default; ``mobius adapter`` writes the files
            that fill them.
        strict: refuse (``StrictError``) a build that would take a fallback costing fused
            components or the KV cache; without it such fallbacks are logged and recorded in
            ``mobius.json``.

    Raises:
        MobiusError: the input cannot be converted (one line; ``InternalError`` for a bug).
        KeyboardInterrupt, MemoryError: never turned into a fallback or an error.

    Returns:
        A ModelPackage; call ``.save(directory)`` to write ``model.onnx`` and ``model.onnx.data``.
    """
    from mobius import failures
    from mobius.convert import build as _build
    from mobius.quant.linears import QuantOptions, default_accuracy_level

    if accuracy_level is None:
        accuracy_level = default_accuracy_level(ep, precision)
    quantization = None
    if precision is not None:
        quantization = QuantOptions(
            precision, block_size, symmetric, accuracy_level, tuple(quant_exclude)
        )
    from mobius.ep import rewrite as _ep

    _ep.check(ep)
    failures.reset()
    with failures.watching_interrupts():
        lora = None
        if adapter is not None:
            from mobius.lora import read_adapter

            lora = read_adapter(adapter)  # refused now, before any model is built
        targets = ()
        if lora_inputs is not None:
            from mobius.lora.inputs import parse_targets

            targets = parse_targets(lora_inputs)
        if _diffusers(src, component):
            from mobius import diffusers

            given = {
                "--precision": precision,
                "--task": task,
                "--ep": ep,
                "--adapter": adapter,
                "--lora-inputs": lora_inputs,
            }
            for flag, value in given.items():
                if value is not None:
                    raise UnsupportedError(f"{flag} does not apply to diffusers models yet")
            return diffusers.build(
                src, dtype=_ep.default_dtype(ep, dtype), weights=weights, component=component,
                trust_remote_code=trust_remote_code,
            )  # fmt: skip
        return _build(
            src,
            dtype=_ep.default_dtype(ep, dtype),
            ep=ep,
            task=task,
            weights=weights,
            trust_remote_code=trust_remote_code,
            strict=strict,
            quantization=quantization,
            features=tuple(features),
            accuracy_level=accuracy_level,
            adapter=lora,
            lora_inputs=targets,
        )


def explain(
    src: str | os.PathLike,
    *,
    task: str | None = None,
    trust_remote_code: bool = False,
    component: str | None = None,
) -> ExplainReport:
    """Report what every module of ``src`` becomes, from its config alone (no weights are read).

    Args:
        src: a checkpoint directory, a ``config.json`` file, or a HuggingFace hub id.
        task: the I/O contract; detected when None.
        trust_remote_code: allow checkpoints whose config points at their own Python code.

    Returns:
        An ExplainReport: per module, the components patterns emitted (with their attributes),
        the ops lowered one by one, the ops with no lowering and the patterns that declined;
        plus a summary (``.summary``), ``.exit_code`` (0 full, 1 no KV cache, 2 blocked),
        ``.to_json()``, ``.render_text()`` and ``.render_html()``.
    """
    from mobius import failures
    from mobius.report import explain as _explain

    failures.reset()
    with failures.watching_interrupts():
        if _diffusers(src, component):
            from mobius import diffusers

            return diffusers.explain(src, component=component)
        return _explain(src, task=task, trust_remote_code=trust_remote_code)


def verify(
    src: str | os.PathLike,
    package: str | os.PathLike,
    *,
    prompt: str | None = None,
    image: str | os.PathLike | None = None,
    audio: str | os.PathLike | None = None,
    new_tokens: int = 8,
    reference_dtype: str | None = None,
    trust_remote_code: bool = False,
) -> VerifyReport:
    """Run the package in ``package`` (a ``mobius build`` output) and the PyTorch model of
    ``src`` on the same inputs; see :func:`mobius.verification.verify`.

    Returns:
        A VerifyReport: per graph and output the max abs and relative differences, argmax
        agreement, greedy tokens; ``.exit_code`` (0 within tolerance, 1 outside),
        ``.render_text()``, ``.to_json()``.
    """
    from mobius.verification import verify as _verify

    return _verify(
        src,
        package,
        prompt=prompt,
        image=image,
        audio=audio,
        new_tokens=new_tokens,
        reference_dtype=reference_dtype,
        trust_remote_code=trust_remote_code,
    )


def build_module(
    module: torch.nn.Module,
    example_inputs: Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor,
    *,
    task: str | None = None,
    dtype: str = "f32",
    strict: bool = False,
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
) -> ModelPackage:
    """Convert a plain ``torch.nn.Module`` (not a transformers model) to ONNX by the same trace,
    patterns, lowering and packaging as ``build``.

    Args:
        module: the module, with its weights; it is copied for tracing, never changed.
        example_inputs: the inputs by name (a dict), or positional (a tuple or one tensor,
            named by ``module.forward``'s parameters). Without ``task`` they are the graph's
            inputs; with one, the module is called with the task's contract instead and they
            only name what it takes.
        task: a single-graph task of ``mobius.tasks.TASKS`` (``"text-generation"``,
            ``"feature-extraction"``, ...): the graph follows that contract (CONTRACTS.md), KV
            cache included where the module takes and returns one (a tuple of ``(key, value)``
            per layer, or a transformers Cache). None: the module's own inputs and outputs
            (a tensor is ``output``, a tuple ``output.{i}``, a dict its keys).
        dtype: ``"f32"``, ``"f16"`` or ``"bf16"``: the graph's dtype (the weights are cast).
        strict: refuse (``StrictError``) a build that would take a fallback.
        dynamic_axes: without ``task``, per input the axes that vary, by index, with a name
            (``{"x": {0: "batch", 1: "sequence_length"}}``); inputs not named with two axes or
            more have axis 0 (``batch``) vary; every other axis keeps the example's size.

    Raises:
        MobiusError: the module cannot be converted (the same one-line reasons as ``build``).

    Returns:
        A ModelPackage; ``.save(directory)`` writes ``model.onnx``, its data and ``mobius.json``.
    """
    from mobius import failures
    from mobius.from_module import build_module as _build_module

    failures.reset()
    with failures.watching_interrupts():
        return _build_module(
            module, example_inputs, task=task, dtype=dtype, strict=strict, dynamic_axes=dynamic_axes
        )


def explain_module(
    module: torch.nn.Module,
    example_inputs: Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor,
    *,
    task: str | None = None,
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
) -> ExplainReport:
    """``explain`` for a plain ``torch.nn.Module``: what every submodule becomes (arguments as
    for ``build_module``)."""
    from mobius import failures
    from mobius.from_module import explain_module as _explain_module

    failures.reset()
    with failures.watching_interrupts():
        return _explain_module(module, example_inputs, task=task, dynamic_axes=dynamic_axes)


def _diffusers(src: str | os.PathLike, component: str | None) -> bool:
    """``src`` is a diffusers pipeline or model directory; ``--component`` needs one."""
    from mobius.diffusers.pipeline import is_diffusers

    if is_diffusers(src):
        return True
    if component is not None:
        from mobius.errors import ConfigError

        raise ConfigError(
            f"--component needs a diffusers pipeline directory (model_index.json); {src} is none"
        )
    return False


def __getattr__(name: str):
    if name == "ModelPackage":
        from mobius.output.package import ModelPackage

        return ModelPackage
    if name == "ExplainReport":
        from mobius.report import ExplainReport

        return ExplainReport
    if name == "VerifyReport":
        from mobius.verification import VerifyReport

        return VerifyReport
    raise AttributeError(name)
