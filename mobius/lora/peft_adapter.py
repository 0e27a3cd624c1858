"""Read and check a PEFT LoRA adapter directory (``adapter_config.json`` +
``adapter_model.safetensors``) from its config and safetensors header; tensors are read on demand.

What PEFT can save and mobius cannot use is refused here, by name, before any model is built:
another PEFT method, DoRA (``use_dora``), LoRA biases (``lora_bias``), LoRA on parameters
(``target_parameters``) or on convolutions, and a pickled ``adapter_model.bin``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mobius.errors import SourceError
from mobius.sources.safetensors_header import TensorEntry, read_header

PREFIX = "base_model.model."  # PeftModel -> LoraModel -> the base model
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"

# key suffix -> (module kind, which factor)
_FACTORS = {
    ".lora_A.weight": ("linear", "A"),
    ".lora_B.weight": ("linear", "B"),
    ".lora_embedding_A": ("embedding", "A"),
    ".lora_embedding_B": ("embedding", "B"),
}
_REFUSED_SUFFIXES = {
    ".lora_magnitude_vector": "DoRA (use_dora)",
    ".lora_A.bias": "LoRA biases (lora_bias)",
    ".lora_B.bias": "LoRA biases (lora_bias)",
}


class AdapterError(SourceError):
    """The adapter directory cannot be read, or holds what mobius does not fold."""


@dataclass(frozen=True)
class LoraModule:
    """One adapted module: ``delta = B @ A * scale`` added to its weight.

    ``path`` is the module's path in the base model (``model.layers.0.self_attn.q_proj``);
    ``kind`` is ``"linear"`` (weight ``[out, in]``, or ``[in, out]`` with ``fan_in_fan_out``)
    or ``"embedding"`` (weight ``[num_embeddings, dim]``, delta transposed).
    """

    path: str
    kind: str
    a: TensorEntry  # [rank, in]
    b: TensorEntry  # [out, rank]
    alpha: float
    scale: float

    @property
    def rank(self) -> int:
        return self.a.shape[0]

    def weight_shape(self, fan_in_fan_out: bool) -> tuple[int, int]:
        """The base weight's shape this delta adds to."""
        out, rows = self.b.shape[0], self.a.shape[1]
        transposed = self.kind == "embedding" or fan_in_fan_out
        return (rows, out) if transposed else (out, rows)


@dataclass
class PeftAdapter:
    """A checked PEFT LoRA adapter: its modules by path and its ``modules_to_save`` tensors."""

    directory: Path
    config: dict
    modules: dict[str, LoraModule]
    # base parameter name -> the adapter's replacement (PEFT's modules_to_save)
    replaced: dict[str, TensorEntry] = field(default_factory=dict)
    fan_in_fan_out: bool = False

    @property
    def name(self) -> str:
        return self.directory.name

    def load(self, entry: TensorEntry) -> torch.Tensor:
        """One adapter tensor, read from the file."""
        from safetensors import safe_open

        with safe_open(str(entry.file), framework="pt") as handle:
            return handle.get_tensor(entry.key)

    def delta(self, module: LoraModule) -> torch.Tensor:
        """``B @ A * scale`` in float32, laid out as the base weight."""
        a = self.load(module.a).float()
        b = self.load(module.b).float()
        delta = (b @ a) * module.scale
        if module.kind == "embedding" or self.fan_in_fan_out:
            delta = delta.t()
        return delta.contiguous()

    def scaled_b(self, module: LoraModule) -> torch.Tensor:
        """``B * scale`` in float32 (``[out, rank]``): the graph input ``--lora-inputs`` expects."""
        return self.load(module.b).float() * module.scale


def read_adapter(directory: str | Path) -> PeftAdapter:
    """Read ``directory``'s config and safetensors header, checking everything that does not
    need the base model; raises AdapterError naming the first problem."""
    directory = Path(directory)
    if not directory.is_dir():
        raise AdapterError(f"adapter directory {directory} does not exist")
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise AdapterError(f"{directory} has no {CONFIG_FILE}; it is not a PEFT adapter")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(f"{config_path} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise AdapterError(f"{config_path} does not hold a JSON object")
    _check_config(config, config_path)
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        pickled = (directory / "adapter_model.bin").is_file()
        hint = "; re-save it with safe_serialization=True" if pickled else ""
        raise AdapterError(f"{directory} has no {WEIGHTS_FILE}{hint}")
    entries = read_header(weights)
    if not entries:
        raise AdapterError(f"{weights} holds no tensors")
    return _modules(directory, config, entries)


def _check_config(config: dict, path: Path) -> None:
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise AdapterError(f"adapter {path.parent}: a {peft_type} adapter; only LoRA is supported")
    if config.get("use_dora"):
        raise AdapterError(
            f"adapter {path.parent}: DoRA (use_dora) is not supported; merge it with PEFT's "
            "merge_and_unload and convert the merged model"
        )
    if config.get("lora_bias"):
        raise AdapterError(f"adapter {path.parent}: LoRA biases (lora_bias) are not supported")
    if config.get("target_parameters"):
        raise AdapterError(
            f"adapter {path.parent}: LoRA on parameters (target_parameters) is not supported"
        )
    for name in ("r", "lora_alpha"):
        value = config.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise AdapterError(f"{path} has no positive number '{name}' (got {value!r})")


def _modules(directory: Path, config: dict, entries: dict[str, TensorEntry]) -> PeftAdapter:
    factors: dict[str, dict[str, TensorEntry]] = {}
    kinds: dict[str, str] = {}
    replaced: dict[str, TensorEntry] = {}
    for key, entry in entries.items():
        if not key.startswith(PREFIX):
            raise AdapterError(
                f"adapter tensor '{key}' does not start with '{PREFIX}'; not a PEFT LoRA adapter"
            )
        rest = key.removeprefix(PREFIX)
        refused = next((w for s, w in _REFUSED_SUFFIXES.items() if rest.endswith(s)), None)
        if refused is not None:
            raise AdapterError(f"adapter tensor '{key}' is for {refused}; not supported")
        suffix = next((s for s in _FACTORS if rest.endswith(s)), None)
        if suffix is None:
            if ".lora_" in rest:
                raise AdapterError(f"adapter tensor '{key}' is not a LoRA factor mobius knows")
            # modules_to_save, or an adapted embedding's own weight (save_embedding_layers,
            # under its LoRA layer's ``base_layer``): a whole tensor of the base, replaced
            replaced[rest.replace(".base_layer.", ".")] = entry
            continue
        kind, factor = _FACTORS[suffix]
        path = rest.removesuffix(suffix)
        factors.setdefault(path, {})[factor] = entry
        kinds[path] = kind
    modules: dict[str, LoraModule] = {}
    for path, pair in factors.items():
        if set(pair) != {"A", "B"}:
            missing = ({"A", "B"} - set(pair)).pop()
            raise AdapterError(f"adapter module '{path}' has no lora_{missing} tensor")
        a, b = pair["A"], pair["B"]
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise AdapterError(
                f"adapter module '{path}' has {len(a.shape)}-D LoRA factors; only linear and "
                "embedding layers are supported (not convolutions)"
            )
        if a.shape[0] != b.shape[1]:
            raise AdapterError(
                f"adapter module '{path}': lora_A {list(a.shape)} and lora_B {list(b.shape)} "
                "disagree on the rank"
            )
        for entry in (a, b):
            if not entry.dtype.is_floating_point:
                raise AdapterError(f"adapter tensor '{entry.key}' is not floating point")
        alpha = float(_pattern_value(config.get("alpha_pattern") or {}, path, config["lora_alpha"]))
        rank = a.shape[0]
        scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
        modules[path] = LoraModule(path, kinds[path], a, b, alpha, scale)
    if not modules and not replaced:
        raise AdapterError(f"{directory / WEIGHTS_FILE} holds no LoRA tensors")
    return PeftAdapter(
        directory=directory,
        config=config,
        modules=dict(sorted(modules.items(), key=lambda kv: _natural_key(kv[0]))),
        replaced=replaced,
        fan_in_fan_out=bool(config.get("fan_in_fan_out")),
    )


def _pattern_value(patterns: dict, path: str, default: float) -> float:
    """PEFT's ``alpha_pattern`` lookup: the first pattern matching the end of the module path."""
    for pattern, value in patterns.items():
        if re.match(rf"(.*\.)?({pattern})$", path):
            return value
    return default


def _natural_key(path: str) -> list:
    """Module paths in model order: 'layers.10' after 'layers.9'."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split(".")]
