"""``mobius.verify``: run a converted package and its PyTorch model on the same inputs and judge
each output against the tolerance of the package's precision."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mobius.errors import SourceError
from mobius.verification.compare import check_output, check_tokens
from mobius.verification.families import family_for
from mobius.verification.inputs import Given
from mobius.verification.pairs import Comparison
from mobius.verification.report import VerifyReport
from mobius.verification.request import Request
from mobius.verification.session import PackageError, running
from mobius.verification.tolerance import Tolerance, tolerance_for

__all__ = ["read_manifest", "verify"]


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
    """Compare the package in ``package`` (a ``mobius build`` output) with the PyTorch model of
    ``src`` (the checkpoint it was converted from).

    Args:
        src: checkpoint directory, hub id, or GGUF file.
        package: the output directory of ``mobius build``.
        prompt, image, audio: inputs to use instead of random ones (text, an image file, a WAV
            file); the family makes a batch of two from each.
        new_tokens: greedy tokens to compare for generative tasks (0: none).
        reference_dtype: run PyTorch in ``f32``, ``f16`` or ``bf16``; None: the checkpoint's dtype.
        trust_remote_code: allow checkpoints that ship their own code.

    Returns:
        A VerifyReport (``exit_code`` 0 within tolerance, 1 outside).

    Raises:
        MobiusError: verify cannot run (one line, exit 2): a missing package or checkpoint, bad
            inputs, a package onnxruntime cannot load, not enough memory.
    """
    from mobius import failures

    package = Path(package)
    manifest = read_manifest(package)
    given = Given(
        prompt,
        None if image is None else _existing(image, "--image"),
        None if audio is None else _existing(audio, "--audio"),
    )
    request = Request(
        str(src), package, manifest, given, new_tokens, reference_dtype, trust_remote_code
    )
    failures.reset()
    with failures.watching_interrupts(), running(package):
        result = family_for(manifest).run(request)
    quantized, int8_activations = _quantization(manifest, package)
    dtype = manifest.get("dtype") or _component_dtype(package, manifest)

    def rule(comparison: Comparison) -> Tolerance:
        return tolerance_for(
            dtype,
            result.reference_dtype,
            quantized,
            float_weights=comparison.float_weights,
            int8_activations=int8_activations,
        )

    judged = [c for c in result.comparisons if c.judged] or result.comparisons
    report = VerifyReport(
        model=str(src),
        package=str(package),
        model_type=manifest.get("model_type", manifest.get("pipeline", "?")),
        task=manifest.get("task", "diffusers pipeline" if "components" in manifest else "?"),
        dtype=dtype + (f", {quantized} weights" if quantized else ""),
        reference_dtype=result.reference_dtype,
        tolerance=rule(judged[0]),
        inputs=result.inputs,
        components=result.components,
    )
    for comparison in result.comparisons:
        tolerance = rule(comparison)
        checks = [check_output(p, tolerance) for p in comparison.pairs]
        tokens = None if comparison.tokens is None else check_tokens(comparison.tokens, tolerance)
        for check in checks:
            check.judged, check.note = comparison.judged, comparison.note
        if tokens is not None:
            tokens.judged, tokens.note = tokens.judged and comparison.judged, comparison.note
        report.outputs += checks
        report.tokens += [tokens] if tokens else []
    return report


def read_manifest(package: Path) -> dict:
    """The package's ``mobius.json``; a SourceError when ``package`` is no mobius output."""
    path = package / "mobius.json"
    if not path.is_file():
        what = "does not exist" if not package.exists() else "has no mobius.json"
        raise SourceError(f"--onnx {package} {what}; pass the output directory of mobius build")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PackageError(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict):
        raise PackageError(f"{path} holds no JSON object; rebuild the package")
    return manifest


def _existing(path: str | os.PathLike, flag: str) -> Path:
    found = Path(path).expanduser()
    if not found.is_file():
        raise SourceError(f"{flag} {path}: no such file")
    return found


def _component_dtype(package: Path, manifest: dict) -> str:
    """A pipeline's dtype: its first component's."""
    for name in manifest.get("components", []):
        try:
            return read_manifest(package / name).get("dtype", "f32")
        except (SourceError, PackageError):
            continue
    return "f32"


def _quantization(manifest: dict, package: Path) -> tuple[str | None, bool]:
    """(``int4``/``int8`` for a weight-only quantized package, else None; whether any
    MatMulNBits takes int8 activations: ``accuracy_level`` above 0, quantized or kept GGUF
    blocks alike)."""
    import onnx

    precision = manifest.get("quantization", {}).get("precision")
    for name in manifest.get("graphs", {}):
        path = package / name
        if not path.is_file():
            continue
        for node in onnx.load(str(path), load_external_data=False).graph.node:
            if node.op_type == "MatMulNBits":
                level = next((a.i for a in node.attribute if a.name == "accuracy_level"), 0)
                if level > 0:
                    return precision, True
    return precision, False
