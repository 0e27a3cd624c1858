"""Inputs that are not a transformers checkpoint mobius converts, refused (or flagged) up front.

Each check names what the input is, what is wrong or unsupported about it, and what to pass
instead: directories of GGUF files (headers checked first, so a corrupt or truncated file says
so), diffusers pipelines and models, quantized checkpoints other than 4-bit GPTQ/AWQ
(``quantization_config``), and vision-language
checkpoints, whose text path alone is converted.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mobius.errors import ConfigError, SourceError
from mobius.gguf import inspect_gguf, is_gguf

log = logging.getLogger("mobius")

PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


def is_gguf_file(path: Path) -> bool:
    """A single GGUF file given as the model (converted by mobius.gguf_source)."""
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
    from mobius.prequantized import spec_of

    method = quantization_method(config)
    if method is not None and spec_of(config) is None:  # GPTQ/AWQ 4-bit: mobius.prequantized
        raise ConfigError(
            f"{path} has a quantization_config ({method}): mobius converts 4-bit GPTQ and AWQ "
            "checkpoints only; pass the unquantized checkpoint it was made from (float16, "
            "bfloat16 or float32 safetensors)"
        )


def quantization_method(config: dict) -> str | None:
    """The quantization method a config declares (its own or a sub-config's), or None."""
    for key in ("quantization_config", "compression_config"):
        spec = config.get(key)
        if spec:
            return _method_name(spec, key)
    for key, value in config.items():
        if isinstance(value, dict) and key.endswith("_config"):
            method = quantization_method(value)
            if method is not None:
                return f"{key}: {method}"
    return None


def _method_name(spec: Any, key: str) -> str:
    if not isinstance(spec, dict):
        return "unreadable"
    method = spec.get("quant_method") or spec.get("format")
    if isinstance(method, str) and method:
        return method
    if spec.get("load_in_4bit") or spec.get("load_in_8bit"):
        return "bitsandbytes"
    return "compressed-tensors" if key == "compression_config" else "method not named"


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


def warn_text_only(hf_config: Any, directory: Path, task: str) -> None:
    """Say that a vision-language checkpoint converts without its image path (one line)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING

    if getattr(hf_config, "vision_config", None) is None:
        return
    if type(hf_config) not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING:
        return
    missing = not any((directory / name).is_file() for name in PROCESSOR_FILES)
    if task == "image-text-to-text":  # the three graphs, image path included
        if missing:
            log.warning(
                "%s: the checkpoint has no preprocessor_config.json or processor_config.json; "
                "the graphs are built, but images must be prepared as the family's processor does",
                hf_config.model_type,
            )
        return
    processor = (
        "; the checkpoint also has no preprocessor_config.json or processor_config.json, "
        "so images could not be prepared for it"
        if missing
        else ""
    )
    from mobius.config import from_hf
    from mobius.tasks.vlm_unsplit import image_path_left_out

    left_out = image_path_left_out(from_hf(hf_config), task)
    log.warning(
        "%s is a vision-language model: mobius converts its text path only (task %s, no "
        "image inputs%s)%s",
        hf_config.model_type,
        task,
        f"; {left_out}" if left_out else "",
        processor,
    )
