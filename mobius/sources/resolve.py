"""Resolve a model source (local directory, hub id or GGUF file) to local files, refusing unsafe
inputs; a GGUF file, and a GPTQ/AWQ checkpoint's weights, through their readers (``readers.py``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mobius import failures
from mobius.errors import ConfigError, SourceError
from mobius.sources import input_kinds, readers
from mobius.sources.quantization_config import spec_of
from mobius.sources.safetensors_header import read_header

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
PICKLE_WEIGHT_NAMES = (
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "tf_model.h5",
    "flax_model.msgpack",
)
PICKLE_WEIGHT_GLOBS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    *input_kinds.PROCESSOR_FILES,
)


@dataclass
class Source:
    """A checkpoint resolved to a local directory."""

    directory: Path
    config: dict
    weight_files: list[Path] = field(default_factory=list)
    weight_map: dict[str, Path] = field(default_factory=dict)  # tensor key -> file, when indexed
    tensors: dict = field(default_factory=dict)  # key -> safetensors_header.TensorEntry
    # a checkpoint read another way than safetensors: a GGUF file's, a GPTQ/AWQ one's (readers.py)
    checkpoint: Any = None

    @property
    def config_path(self) -> Path:
        return self.directory / "config.json"

    def extra_files(self) -> list[Path]:
        """Tokenizer and generation files that travel with the converted model."""
        return [self.directory / n for n in TOKENIZER_FILES if (self.directory / n).is_file()]


def resolve(
    src: str | os.PathLike, *, trust_remote_code: bool = False, need_weights: bool = True
) -> Source:
    """Find the checkpoint's files, read its config and check that it is safe to convert."""
    if input_kinds.is_gguf_file(Path(src).expanduser()):
        resolve_gguf = readers.reader(readers.GGUF)
        return resolve_gguf(Path(src).expanduser().resolve(), need_weights=need_weights)
    input_kinds.check_file(Path(src).expanduser())
    directory = _local_directory(src, need_weights=need_weights, code=trust_remote_code)
    input_kinds.check_directory(directory)
    config = read_config(directory)
    check_remote_code(config, trust_remote_code)
    input_kinds.check_config(config, directory / "config.json")
    spec = spec_of(config)
    if spec is not None:  # GPTQ/AWQ: traced as the float model, packed weights kept
        config = {k: v for k, v in config.items() if k != "quantization_config"}
    source = Source(directory=directory, config=config)
    if need_weights:
        source.weight_files, source.weight_map = _weight_files(directory)
        for file in source.weight_files:  # fail on a corrupt or truncated file before tracing
            source.tensors.update(read_header(file))
        if spec is not None:
            source.checkpoint = readers.reader(readers.PREQUANTIZED)(source.tensors, spec)
            source.tensors = source.checkpoint.entries
    return source


def read_config(directory: Path) -> dict:
    """Read ``config.json`` as a dict, with clear errors when it is absent or not JSON."""
    path = directory / "config.json"
    if not path.is_file():
        raise ConfigError(
            f"no config.json in {directory}: pass a HuggingFace checkpoint directory "
            "(one made by save_pretrained) or a hub id"
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); fix or regenerate it with save_pretrained"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} must hold a JSON object, got {type(config).__name__}")
    return config


def check_remote_code(config: dict, trust_remote_code: bool) -> None:
    """Refuse configs whose model code lives in the checkpoint unless the user allowed it."""
    auto_map = config.get("auto_map")
    if auto_map and not trust_remote_code:
        modules = sorted({str(v).split(".")[0] + ".py" for v in _flatten(auto_map)})
        raise SourceError(
            f"this checkpoint needs its own Python code ({', '.join(modules)}), which would run "
            "on this machine; review it and pass --trust-remote-code to allow it"
        )
    if auto_map is not None and not isinstance(auto_map, (dict, list)):
        raise ConfigError(
            f"config.json 'auto_map' must map auto classes to code, got {auto_map!r}; "
            "remove it or fix config.json"
        )


def _flatten(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _flatten(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _flatten(v)]
    return [str(value).split("--")[-1]] if value else []


def _local_directory(src: str | os.PathLike, *, need_weights: bool, code: bool = False) -> Path:
    path = Path(src).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.is_file() and path.name == "config.json":
        return path.parent.resolve()
    text = str(src)
    if path.exists() or text.startswith((".", "/", "~")) or text.count("/") > 1:
        raise SourceError(
            f"{src} is not a checkpoint directory: pass a folder that holds config.json"
        )
    return _download(text, need_weights=need_weights, code=code)


def _download(repo_id: str, *, need_weights: bool, code: bool = False) -> Path:
    """The hub snapshot's config, tokenizer files and weights; its ``.py`` files too with
    ``code`` (``--trust-remote-code``)."""
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.txt", "*.model", "*.jinja"]
        if need_weights:
            patterns.append("*.safetensors")
        if code:
            patterns.append("*.py")
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as exc:  # the hub raises many types; all mean the same to the user
        failures.raise_if_fatal(exc)
        reason = type(exc).__name__
        raise SourceError(
            f"could not fetch '{repo_id}' from the HuggingFace hub ({reason}); "
            "pass a local checkpoint directory instead, e.g. --model ./my-checkpoint"
        ) from None


def _weight_files(directory: Path) -> tuple[list[Path], dict[str, Path]]:
    index = directory / SAFETENSORS_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            weight_map = None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise SourceError(
                f"{index} is not a valid safetensors index (needs a 'weight_map' from tensor "
                "names to shard files); re-save the checkpoint or delete the index"
            )
        files = {name: directory / name for name in set(weight_map.values())}
        for name, file in sorted(files.items()):
            if Path(name).is_absolute() or ".." in Path(name).parts:
                raise SourceError(
                    f"{index.name} names the shard {name}, outside {directory}; refusing to read it"
                )
            if not file.is_file():
                raise SourceError(
                    f"{index.name} names the shard {name}, which is missing from {directory}; "
                    "download it again"
                )
        return sorted(files.values()), {k: files[v] for k, v in weight_map.items()}
    shards = sorted(directory.glob("*.safetensors"))
    if shards:
        return shards, {}
    pickles = [n for n in PICKLE_WEIGHT_NAMES if (directory / n).exists()]
    pickles += sorted(p.name for g in PICKLE_WEIGHT_GLOBS for p in directory.glob(g))
    if pickles:
        raise SourceError(
            f"{directory} has only {pickles[0]} (pickle or framework weights, no *.safetensors), "
            "and loading pickle can run arbitrary code, so mobius never does; convert it once, "
            "in a trusted environment, with "
            "AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir) (transformers saves "
            "safetensors; use AutoModel for encoders), then run mobius again"
        )
    raise SourceError(
        f"no *.safetensors weights in {directory}; pass --no-weights to build the graph only"
    )
