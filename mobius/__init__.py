"""mobius: turn a HuggingFace checkpoint into a ready-to-run ONNX model in one call."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mobius.errors import MobiusError

if TYPE_CHECKING:
    from mobius.package import ModelPackage
    from mobius.report import ExplainReport

__version__ = "0.1.0"
__all__ = ["ExplainReport", "MobiusError", "ModelPackage", "build", "explain"]


def build(
    src: str | os.PathLike,
    *,
    dtype: str = "f32",
    task: str | None = None,
    weights: bool = True,
    trust_remote_code: bool = False,
    strict: bool = False,
    precision: str | None = None,
    block_size: int = 32,
    symmetric: bool = False,
    accuracy_level: int = 0,
    quant_exclude: Sequence[str] = (),
) -> ModelPackage:
    """Convert ``src`` (a local checkpoint directory or a hub id) to ONNX.

    Args:
        src: directory holding ``config.json`` and ``*.safetensors``, a ``.gguf`` file (its
            quantized blocks kept where MatMulNBits holds them), or a HuggingFace hub id.
        dtype: ``"f32"``, ``"f16"`` or ``"bf16"``; weights are cast while they are written.
        task: the I/O contract (``"text-generation"``, ``"fill-mask"``, ...: ``mobius.tasks.TASKS``); detected when None.
        weights: False builds the graph only; parameters then become named graph inputs.
        trust_remote_code: allow checkpoints whose config points at their own Python code.
        precision: ``"int4"`` or ``"int8"`` quantizes every linear weight (round to nearest, per
            block along K) into ``com.microsoft`` ``MatMulNBits``; None keeps ``dtype``.
        block_size: weights per scale (a power of two, at least 16).
        symmetric: no zero points (asymmetric, the default, stores one per block).
        accuracy_level: MatMulNBits' compute type: 0 the activation's, 4 int8 (fastest on CPU);
            also for the blocks a GGUF file's weights keep.
        quant_exclude: globs over module paths (``lm_head``, ``*.mlp.down_proj``) kept in float.
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
    from mobius.quantize import QuantOptions
    from mobius.synth.build import build as _build

    quantization = None
    if precision is not None:
        quantization = QuantOptions(
            precision, block_size, symmetric, accuracy_level, tuple(quant_exclude)
        )
    failures.reset()
    with failures.watching_interrupts():
        return _build(
            src,
            dtype=dtype,
            task=task,
            weights=weights,
            trust_remote_code=trust_remote_code,
            strict=strict,
            quantization=quantization,
            accuracy_level=accuracy_level,
        )


def explain(
    src: str | os.PathLike, *, task: str | None = None, trust_remote_code: bool = False
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
        return _explain(src, task=task, trust_remote_code=trust_remote_code)


def __getattr__(name: str):
    if name == "ModelPackage":
        from mobius.package import ModelPackage

        return ModelPackage
    if name == "ExplainReport":
        from mobius.report import ExplainReport

        return ExplainReport
    raise AttributeError(name)
