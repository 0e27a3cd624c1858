"""The JSON Schema (draft 2020-12 subset) of ``explain.json``, and a small checker for it.

Human documentation: ``docs/explain-schema.md``. The checker supports the keywords used here
(type, properties, required, additionalProperties, items, enum, minimum, const), so tests and
users can validate a report without installing ``jsonschema``.
"""

from __future__ import annotations

from typing import Any

from mobius.fallbacks import (
    ANY_IMAGE_SIZE,
    ANY_LENGTH,
    FUSED_ATTENTION,
    KINDS,
    KV_CACHE,
    PARALLEL_PREFILL,
)
from mobius.report.model import SCHEMA_VERSION, STATUSES, VERDICTS

_COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}}
_PATHS = {"type": "array", "items": {"type": "string"}}
_COUNT = {"type": "integer", "minimum": 0}
_SHARE = {"type": "number", "minimum": 0}


def _object(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
        **extra,
    }


COMPONENT = _object(
    {
        "pattern": {"type": "string"},
        "component": {"type": "string"},
        "attributes": {"type": "object"},
    }
)
DECLINE = _object({"pattern": {"type": "string"}, "reason": {"type": "string"}})
MODULE = _object(
    {
        "path": {"type": "string"},
        "cls": {"type": "string"},
        "status": {"enum": list(STATUSES)},
        "components": {"type": "array", "items": COMPONENT},
        "lowered_ops": _COUNTS,
        "blocked_ops": _COUNTS,
        "declines": {"type": "array", "items": DECLINE},
        "parameters": _COUNT,
        "component_parameters": _COUNT,
        "nodes": _COUNT,
        "component_nodes": _COUNT,
    }
)
GAP = _object(
    {
        "kind": {"enum": ["lowering", "pattern", "cache", "attention", "image", "genai"]},
        "subject": {"type": "string"},
        "modules": _PATHS,
        "next_step": {"type": "string"},
    }
)
FALLBACK = _object(
    {
        "kind": {"enum": list(KINDS)},
        "reason": {"type": "string"},
        "costs": {
            "type": "array",
            "items": {
                "enum": [FUSED_ATTENTION, KV_CACHE, PARALLEL_PREFILL, ANY_LENGTH, ANY_IMAGE_SIZE]
            },
        },
    }
)
SUMMARY = _object(
    {
        "verdict": {"enum": list(VERDICTS)},
        "exit_code": {"enum": list(VERDICTS.values())},
        "nodes": _COUNT,
        "component_nodes": _COUNT,
        "lowered_nodes": _COUNT,
        "blocked_nodes": _COUNT,
        "parameters": _COUNT,
        "component_parameters": _COUNT,
        "node_coverage": _SHARE,
        "parameter_coverage": _SHARE,
        "kv_cache": {"type": "boolean"},
        "cache_supported": {"type": "boolean"},
        "cache_layers": _COUNT,
        "unsupported_ops": {"type": "object", "additionalProperties": _PATHS},
        "gaps": {"type": "array", "items": GAP},
        "fallbacks": {"type": "array", "items": FALLBACK},
    }
)
WEIGHT = _object(
    {
        "name": {"type": "string"},
        "source": {"type": "string"},
        "format": {"enum": ["float", "MatMulNBits", "GatherBlockQuantized", "QMoE"]},
        "bits": {"type": "integer", "minimum": 1},
        "block_size": _COUNT,
        "zero_points": {"type": "boolean"},
        "dtype": {"type": "string"},
    }
)
SCHEMA: dict[str, Any] = _object(
    {
        "schema_version": {"const": SCHEMA_VERSION},
        "source": {"type": "string"},
        "model_type": {"type": "string"},
        "task": {"type": "string"},
        "modules": {"type": "array", "items": MODULE},
        "summary": SUMMARY,
        "weights": {"type": "array", "items": WEIGHT},
    },
    **{
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"mobius explain report, schema version {SCHEMA_VERSION}",
    },
)

_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
}


def errors(value: Any, schema: dict[str, Any] = SCHEMA, where: str = "$") -> list[str]:
    """Every place where ``value`` breaks ``schema``, as ``"$.path: problem"`` lines."""
    out: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        is_bool = isinstance(value, bool)
        if not isinstance(value, _TYPES[kind]) or (is_bool and kind != "boolean"):
            return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if "const" in schema and value != schema["const"]:
        out.append(f"{where}: expected {schema['const']!r}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        out.append(f"{where}: {value} is below {schema['minimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                out += errors(item, props[key], f"{where}.{key}")
            elif extra is False:
                out.append(f"{where}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                out += errors(item, extra, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += errors(item, schema["items"], f"{where}[{i}]")
    return out
