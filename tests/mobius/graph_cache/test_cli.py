"""The build options the CLI gives the cache key, and the builds the cache leaves alone."""

from __future__ import annotations

from mobius.build_cli import _cache_lookup
from mobius.cli import _parser
from mobius.graph_cache.cli import build_options


def _args(tmp_path, *extra: str):
    return _parser().parse_args(
        ["build", "--model", str(tmp_path), "--output", str(tmp_path / "out"), *extra]
    )


def test_lora_inputs_are_part_of_the_key(tmp_path):
    plain = build_options(_args(tmp_path))
    with_inputs = build_options(_args(tmp_path, "--lora-inputs"))
    assert plain["lora_inputs"] is None
    assert with_inputs["lora_inputs"] and with_inputs != plain


def test_a_folded_adapter_bypasses_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("MOBIUS_NO_CACHE", raising=False)  # the suite turns the cache off
    monkeypatch.setenv("MOBIUS_CACHE", str(tmp_path / "cache"))
    assert _cache_lookup(_args(tmp_path, "--adapter", str(tmp_path / "adapter"))) is None
    assert not (tmp_path / "cache").exists()
