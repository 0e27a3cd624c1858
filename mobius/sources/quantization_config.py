"""What a config's ``quantization_config`` says: the method it names, whatever it is, and for the
4-bit GPTQ and AWQ checkpoints mobius reads as they are (``mobius.quant.prequantized``), the
checked spec: bits, group size and how zero points are stored."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mobius.errors import ConfigError


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


METHODS = ("gptq", "awq")


@dataclass(frozen=True)
class PrequantSpec:
    """What ``quantization_config`` says, checked."""

    method: str
    bits: int
    group_size: int  # -1: one group over all of K
    zero_offset: int  # added to stored zero points (1 for GPTQ v1)

    def to_json(self) -> dict:
        return {"method": self.method, "bits": self.bits, "group_size": self.group_size}


def spec_of(config: dict) -> PrequantSpec | None:
    """The GPTQ/AWQ spec of a config, None for an unquantized one; ConfigError for a GPTQ/AWQ
    variant that is not mapped (other bit widths, AWQ other than gemm)."""
    spec = config.get("quantization_config")
    if not isinstance(spec, dict) or spec.get("quant_method") not in METHODS:
        return None
    method = spec["quant_method"]
    bits = spec.get("bits", spec.get("w_bit"))
    if bits != 4:
        raise ConfigError(
            f"config.json has a {method.upper()} quantization_config with bits={bits!r}; mobius "
            f"maps 4-bit {method.upper()} weights only; pass the unquantized checkpoint"
        )
    group = spec.get("group_size", spec.get("q_group_size", 128))
    if not isinstance(group, int) or (group != -1 and group <= 0):
        raise ConfigError(f"config.json {method.upper()} group_size={group!r} is not valid")
    if method == "awq":
        version = str(spec.get("version", "gemm")).lower()
        if version != "gemm":
            raise ConfigError(
                f"config.json has an AWQ quantization_config with version={version!r}; mobius "
                "maps the 'gemm' packing only; pass the unquantized checkpoint"
            )
        if spec.get("zero_point") is False:
            raise ConfigError("AWQ without zero points (zero_point: false) is not mapped")
        return PrequantSpec(method, bits, group, 0)
    v1 = str(spec.get("checkpoint_format", "gptq")).lower() != "gptq_v2"
    return PrequantSpec(method, bits, group, 1 if v1 else 0)
