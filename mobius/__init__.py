"""mobius: turn a HuggingFace checkpoint into a ready-to-run ONNX model in one call."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mobius.errors import MobiusError

if TYPE_CHECKING:
    from mobius.package import ModelPackage

__version__ = "0.1.0"
__all__ = ["MobiusError", "ModelPackage", "build"]


def build(
    src: str | os.PathLike,
    *,
    dtype: str = "f32",
    task: str | None = None,
    weights: bool = True,
    trust_remote_code: bool = False,
) -> ModelPackage:
    """Convert ``src`` (a local checkpoint directory or a hub id) to ONNX.

    Args:
        src: directory holding ``config.json`` and ``*.safetensors``, or a HuggingFace hub id.
        dtype: ``"f32"``, ``"f16"`` or ``"bf16"``; weights are cast while they are written.
        task: the I/O contract (``"causal-lm"``, ``"feature-extraction"``); detected when None.
        weights: False builds the graph only; parameters then become named graph inputs.
        trust_remote_code: allow checkpoints whose config points at their own Python code.

    Returns:
        A ModelPackage; call ``.save(directory)`` to write ``model.onnx`` and ``model.onnx.data``.
    """
    from mobius.synth.build import build as _build

    return _build(src, dtype=dtype, task=task, weights=weights, trust_remote_code=trust_remote_code)


def __getattr__(name: str):
    if name == "ModelPackage":
        from mobius.package import ModelPackage

        return ModelPackage
    raise AttributeError(name)
