"""Which task family checks a package, from its ``mobius.json``: one module per family, each
with ``run(Request) -> Result``. A new family (audio LLMs' ``audio_encoder.onnx``) is one module
and one line here."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from mobius.errors import UnsupportedError


def _graphs(manifest: dict) -> set[str]:
    return set(manifest.get("graphs", {}))


# in order: the first whose test holds checks the package
FAMILIES: tuple[tuple[str, Callable[[dict], bool]], ...] = (
    ("diffusers", lambda m: m.get("library") == "diffusers" or "component" in m),
    ("seq2seq", lambda m: "encoder_model.onnx" in _graphs(m)),
    ("vlm", lambda m: "vision_encoder.onnx" in _graphs(m)),
    ("causal", lambda m: m.get("task") == "text-generation" and "model.onnx" in _graphs(m)),
    ("heads", lambda m: "model.onnx" in _graphs(m)),
)


def family_for(manifest: dict) -> ModuleType:
    """The ``mobius.verification`` module that checks a package with this manifest."""
    for name, applies in FAMILIES:
        if applies(manifest):
            return importlib.import_module(f"mobius.verification.{name}")
    graphs = ", ".join(sorted(_graphs(manifest))) or "none"
    raise UnsupportedError(
        f"verify does not check {manifest.get('task', 'this')} packages with graphs {graphs} yet"
    )
