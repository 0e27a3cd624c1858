"""Inputs that are not a transformers checkpoint mobius converts, refused (or flagged) up front.

Each check names what the input is, what is wrong or unsupported about it, and what to pass
instead: directories of GGUF files (headers checked first, so a corrupt or truncated file says
so), diffusers pipelines and models, and quantized checkpoints other than 4-bit GPTQ/AWQ
(``quantization_config``). (A vision-language checkpoint converted as text only is flagged by
``tasks/vlm_unsplit.warn_text_only``, once the task is known.)
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mobius.errors import ConfigError, SourceError
from mobius.sources.gguf_header import inspect_gguf, is_gguf
from mobius.sources.quantization_config import quantization_method, spec_of

log = logging.getLogger("mobius")

PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


def is_gguf_file(path: Path) -> bool:
    """A single GGUF file given as the model (converted by mobius.gguf.source)."""
    return path.is_file() and path.name != "config.json" and is_gguf(path)


def check_file(path: Path) -> None:
    """Refuse a model given as a single file that is not ``config.json`` (GGUF)."""
    if path.is_file() and path.name != "config.json" and is_gguf(path):
        refuse_gguf([path])


def check_directory(directory: Path) -> None:
    """Refuse a directory that holds GGUF files and no config.json."""
    if not (directory / "config.json").is_file():
        ggufs = sorted(p for p in directory.glob("*") if p.is_file() and p.suffix == ".gguf")
        if ggufs:
            refuse_gguf(ggufs)


def check_config(config: dict, path: Path) -> None:
    """Refuse configs mobius cannot convert yet: quantized checkpoints other than 4-bit GPTQ and
    AWQ. (diffusers configs, ``_class_name``, go to ``mobius.diffusers`` before this.)"""
    method = quantization_method(config)
    if method is not None and spec_of(config) is None:  # GPTQ/AWQ 4-bit: mobius.quant.prequantized
        raise ConfigError(
            f"{path} has a quantization_config ({method}): mobius converts 4-bit GPTQ and AWQ "
            "checkpoints only; pass the unquantized checkpoint it was made from (float16, "
            "bfloat16 or float32 safetensors)"
        )


def refuse_gguf(files: list[Path]) -> None:
    """Check every GGUF file's header (raising on the first bad one), then refuse the directory:
    a GGUF model is given as its file."""
    infos = [inspect_gguf(f) for f in files]
    first = infos[0]
    what = f"{first.architecture or 'unknown architecture'}, {len(first.tensors)} tensors"
    types = ", ".join(first.tensor_types) or "no tensors"
    more = f" (and {len(files) - 1} more GGUF files)" if len(files) > 1 else ""
    raise SourceError(
        f"{first.path.name}{more} is a valid GGUF file ({what}: {types}), in a directory "
        f"without config.json; pass the GGUF file itself: --model {first.path}"
    )


def check_diffusers_pipeline(directory: Path) -> dict[str, tuple[str, str]]:
    """The components ``model_index.json`` lists (name -> (library, class name)); refuses a
    broken index and a component whose folder or config file is missing."""
    index_path = directory / "model_index.json"
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SourceError(f"{index_path} is not valid JSON ({exc}); download it again") from None
    if not isinstance(index, dict):
        raise SourceError(f"{index_path} must hold a JSON object; download it again")
    pipeline = index.get("_class_name", "a pipeline")
    components = {
        name: (entry[0], entry[1])
        for name, entry in index.items()
        if not name.startswith("_")
        and isinstance(entry, list)
        and len(entry) == 2
        and all(isinstance(e, str) for e in entry)
    }
    for name, (library, class_name) in sorted(components.items()):
        folder = directory / name
        if not folder.is_dir():
            raise SourceError(
                f"diffusers pipeline {directory.name} ({pipeline}): model_index.json lists the "
                f"component '{name}' ({library} {class_name}) but {folder} is missing; "
                "download the whole pipeline again"
            )
        needed = _component_config(class_name)
        if needed is not None and not (folder / needed).is_file():
            raise SourceError(
                f"diffusers pipeline {directory.name} ({pipeline}): component '{name}' "
                f"({class_name}) has no {needed} in {folder}; download the whole pipeline again"
            )
    return components


def _component_config(class_name: str) -> str | None:
    """The file a pipeline component's folder must hold (None: tokenizers, any files)."""
    if class_name.endswith("Scheduler"):
        return "scheduler_config.json"
    if "Tokenizer" in class_name:
        return None
    if class_name.endswith(("Processor", "FeatureExtractor")):
        return "preprocessor_config.json"
    return "config.json"
