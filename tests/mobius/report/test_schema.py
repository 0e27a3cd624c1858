"""The JSON report follows the documented, versioned schema."""

from __future__ import annotations

import json
from pathlib import Path

import mobius
from mobius.report import SCHEMA_VERSION
from mobius.report.schema import SCHEMA, errors

DOC = Path(__file__).parents[3] / "docs" / "explain-schema.md"


def _keys(schema: dict) -> set[str]:
    out = set(schema.get("properties", {}))
    for sub in schema.get("properties", {}).values():
        out |= _keys(sub)
        if isinstance(sub.get("items"), dict):
            out |= _keys(sub["items"])
    return out


def test_report_json_matches_schema(checkpoints):
    report = mobius.explain(checkpoints.get("llama")[0])
    data = json.loads(report.to_json())
    assert (
        data["schema_version"] == SCHEMA_VERSION == SCHEMA["properties"]["schema_version"]["const"]
    )
    assert errors(data) == []
    assert list(data) == [
        "schema_version", "source", "model_type", "task", "modules", "summary", "weights"
    ]  # fmt: skip
    assert data["weights"] == []  # only a build, which makes the graph, records storage


def test_checker_reports_problems():
    assert errors({"schema_version": SCHEMA_VERSION}) != []
    bad_module = {"path": "x", "cls": "Y", "status": "weird"}
    found = errors(bad_module, SCHEMA["properties"]["modules"]["items"])
    assert "$: 'weird' is not one of ['component', 'lowered', 'blocked', 'empty']" in [
        e.replace("$.status", "$") for e in found
    ]
    assert any("missing 'components'" in e for e in found)
    assert errors(True, {"type": "integer"}) == ["$: expected integer, got bool"]


def test_every_field_is_documented():
    text = DOC.read_text(encoding="utf-8")
    missing = sorted(k for k in _keys(SCHEMA) if f"`{k}`" not in text)
    assert not missing, f"document these fields in {DOC.name}: {missing}"
    assert f"schema_version` | integer, currently `{SCHEMA_VERSION}`" in text
