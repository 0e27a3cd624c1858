"""The graph cache key: everything that shapes a built package other than the weights' values.

Two builds with the same key emit the same graphs and the same companion texts, so the second may
take the first's graphs and only write its own weights. The key covers:

- the checkpoint's config (``config.json`` as a whole, a superset of every field the trace reads;
  only ``_name_or_path``, which names where it was saved, is left out);
- the checkpoint's tensors: every key with its stored dtype and shape (and a GGUF tensor's block
  type), but not its values or file offsets;
- the contents of the files that travel with the model (tokenizer, generation config), which
  ``genai_config.json`` reads, and of the checkpoint's own Python files (remote code);
- every build option (task, dtype, EP, precision, block size, symmetry, accuracy level, excluded
  modules, features, sequence length, release, strict, component) and the environment variables
  that change a trace;
- the versions of Python, mobius (a digest of its source files, so an edited checkout never reuses
  an older graph), transformers, torch, onnx, onnx-ir and onnxscript.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "build_key", "versions"]

FORMAT = 1  # the layout of a cache entry; a change makes every older entry a miss
_DROPPED_CONFIG_FIELDS = ("_name_or_path", "_commit_hash")
_ENVIRONMENT = ("MOBIUS_FULL_TRACE",)
_LIBRARIES = ("transformers", "torch", "onnx", "onnx-ir", "onnxscript", "safetensors", "gguf")
_CODE_ROOTS = ("mobius", "lowering", "patterns")


@functools.cache
def _code_digest() -> str:
    """sha256 over the Python files of mobius and its pattern and lowering tables."""
    top = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for root in _CODE_ROOTS:
        for path in sorted((top / root).rglob("*.py")):
            digest.update(str(path.relative_to(top)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def versions() -> dict[str, str]:
    """The versions that shape a graph, read without importing the libraries. mobius's own is
    read from the loaded package (always imported before its submodules), not imported here: the
    build driver (``mobius.convert``), which ``mobius`` imports, imports the graph cache."""
    found = {
        "python": sys.version.split()[0],
        "mobius": f"{sys.modules['mobius'].__version__}+{_code_digest()[:16]}",
    }
    for name in _LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "-"
    return found


def _tensors(source: Any) -> list[list[Any]]:
    """Key, stored dtype and shape of every checkpoint tensor (and a GGUF tensor's block type)."""
    checkpoint = source.checkpoint
    entries = checkpoint.entries if checkpoint is not None else source.tensors
    type_name = getattr(checkpoint, "type_name", None)
    rows = []
    for key in sorted(entries):
        entry = entries[key]
        row = [key, entry.dtype_name, list(entry.shape)]
        if type_name is not None:
            row.append(type_name(key))
        rows.append(row)
    return rows


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _companions(source: Any) -> dict[str, str]:
    """File name -> sha256 of each file that travels with the model (config.json aside), and of
    the checkpoint's own Python code (``--trust-remote-code``)."""
    files = [*source.extra_files(), *sorted(source.directory.glob("*.py"))]  # remote code too
    return {path.name: _file_digest(path) for path in files if path.is_file()}


def _config(source: Any) -> dict[str, Any]:
    """``config.json`` as written (a GPTQ/AWQ checkpoint's ``quantization_config`` included),
    less the fields that only say where it was saved."""
    try:
        raw = json.loads(source.config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raw = source.config
    return {k: v for k, v in raw.items() if k not in _DROPPED_CONFIG_FIELDS}


def build_key(source: Any, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The key of a build of ``source`` (a resolved ``mobius.sources.resolve.Source``) with ``options``
    (every build option, JSON-able): its sha256 and the document it hashes."""
    config = _config(source)
    document = {
        "format": FORMAT,
        "config": config,
        "tensors": _tensors(source),
        "files": _companions(source),
        "options": dict(sorted(options.items())),
        "environment": {name: os.environ.get(name) for name in _ENVIRONMENT},
        "versions": versions(),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest(), document
