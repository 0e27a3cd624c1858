"""The PyTorch side of ``mobius verify``: the checkpoint found, its memory need checked, and the
model loaded once, in the checkpoint's own dtype (or the one asked for)."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mobius.errors import ConfigError, SourceError
from mobius.verification import memory
from mobius.verification.request import Request
from mobius.verification.tolerance import TORCH_NAMES

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Checkpoint:
    """A checkpoint as verify loads it: where it is, its config, and its tensors' shapes."""

    src: str
    directory: Path
    config: dict
    dtype: torch.dtype  # what its weights are stored in (a GGUF file: float32, dequantized)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    gguf: Path | None = None  # the file, for a GGUF source

    def reference_dtype(self, wanted: str | None) -> torch.dtype:
        """``wanted`` (``f32``, ``f16``, ``bf16``), else the checkpoint's own dtype."""
        if wanted is None:
            return self.dtype
        if wanted not in DTYPES:
            raise ConfigError(
                f"unknown --reference-dtype {wanted!r}; choose one of: f32, f16, bf16"
            )
        return DTYPES[wanted]


def open_checkpoint(src: str | os.PathLike, *, trust_remote_code: bool = False) -> Checkpoint:
    """Find ``src`` (a checkpoint directory, hub id or GGUF file) and read its headers."""
    from mobius.gguf import source as _gguf  # noqa: F401  (registers its reader: sources/readers.py)
    from mobius.quant import prequantized as _gptq_awq  # noqa: F401  (registers its reader too)
    from mobius.sources import input_kinds
    from mobius.sources import resolve as source_mod

    path = Path(src).expanduser()
    if input_kinds.is_gguf_file(path):
        resolved = source_mod.resolve(path, need_weights=True)
        shapes = [tuple(getattr(e, "shape", ())) for e in resolved.tensors.values()]
        return Checkpoint(str(src), path.parent, resolved.config, torch.float32, shapes, path)
    resolved = source_mod.resolve(src, trust_remote_code=trust_remote_code, need_weights=True)
    if not resolved.tensors and resolved.checkpoint is None:
        raise SourceError(f"{src} has no safetensors weights to compare with")
    entries = (resolved.checkpoint.entries if resolved.checkpoint else resolved.tensors).values()
    shapes = [tuple(e.shape) for e in entries]
    return Checkpoint(
        str(src),
        resolved.directory,
        resolved.config,
        stored_dtype(resolved.config, entries),
        shapes,
    )


def stored_dtype(config: dict, entries: Any) -> torch.dtype:
    """The checkpoint's dtype: config.json's ``dtype`` (``torch_dtype``), else the floating dtype
    most of its tensors are stored in."""
    named = config.get("dtype") or config.get("torch_dtype")
    text = config.get("text_config") or {}
    named = named or (
        text.get("dtype") or text.get("torch_dtype") if isinstance(text, dict) else None
    )
    if isinstance(named, str) and isinstance(getattr(torch, named, None), torch.dtype):
        found = getattr(torch, named)
        if found in DTYPES.values():
            return found
    counts = Counter(
        e.dtype for e in entries if getattr(e, "dtype", None) in (*DTYPES.values(), torch.float64)
    )
    dtype = counts.most_common(1)[0][0] if counts else torch.float32
    return torch.float32 if dtype == torch.float64 else dtype


def check_memory(checkpoint: Checkpoint, dtype: torch.dtype, package: Path) -> None:
    """Refuse with one line when the model in ``dtype`` and the package will not fit."""
    memory.check_fits(memory.tensor_bytes(checkpoint.shapes, dtype), memory.package_bytes(package))


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """No progress bars from transformers or diffusers while a model loads."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    tqdm_env = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF reader's own bar
    try:
        import diffusers.utils.logging as diffusers_logging

        diffusers_logging.disable_progress_bar()
    except ImportError:
        diffusers_logging = None
    try:
        yield
    finally:
        if tqdm_env is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = tqdm_env
        if was:
            hf_logging.enable_progress_bar()
            if diffusers_logging is not None:
                diffusers_logging.enable_progress_bar()


def dtype_name(dtype: torch.dtype) -> str:
    return TORCH_NAMES.get(str(dtype).removeprefix("torch."), str(dtype))


def load_transformers(
    checkpoint: Checkpoint,
    task_name: str,
    dtype: torch.dtype,
    *,
    trust_remote_code: bool = False,
) -> torch.nn.Module:
    """The HF model of ``task_name`` for the checkpoint, with its weights, in eval mode: the
    class mobius traced for that task, eager attention (the sweeps' reference)."""
    from mobius.sources import config as config_mod
    from mobius.sources import remote_code
    from mobius.tasks.detect import get_task
    from mobius.tasks.nested import FromConfig

    if trust_remote_code and remote_code.has_code(checkpoint.config):
        hf_config = remote_code.load_config(checkpoint.config, checkpoint.directory)
    else:
        hf_config = config_mod.hf_config_from_dict(checkpoint.config)
    arch = config_mod.from_hf(hf_config)
    auto = get_task(task_name, arch).auto_class(arch)
    cls = auto.model_class if isinstance(auto, FromConfig) else auto
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": "eager"}
    if checkpoint.gguf is not None:
        kwargs["gguf_file"] = checkpoint.gguf.name
    if trust_remote_code:
        kwargs["trust_remote_code"] = True
    try:
        with quiet_loading():
            model = cls.from_pretrained(checkpoint.directory, **kwargs)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"transformers cannot load {checkpoint.src} as {getattr(cls, '__name__', cls)}: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc
    return model.eval()


def load_for(request: Request) -> tuple[Checkpoint, torch.nn.Module, torch.dtype]:
    """The checkpoint of ``request.src``, its PyTorch model of the request's task and the
    reference dtype it is loaded in, once the memory check has passed."""
    checkpoint = open_checkpoint(request.src, trust_remote_code=request.trust_remote_code)
    dtype = checkpoint.reference_dtype(request.reference_dtype)
    check_memory(checkpoint, dtype, request.package)
    model = load_transformers(
        checkpoint, request.task, dtype, trust_remote_code=request.trust_remote_code
    )
    return checkpoint, model, dtype
