"""A cache hit writes the package a cold build writes, byte for byte, for a checkpoint of the same
shape with other weights (a fine-tune): causal LM (f32, int4), GGUF, seq2seq and VLM."""

from __future__ import annotations

from pathlib import Path

import pytest

from mobius.cli import main
from tests.mobius.graph_cache.conftest import assert_same_package


def _pair(cache: Path, tmp_path: Path, command: list[str], a: str, b: str, forbid) -> None:
    """Build ``a`` (a miss, kept), then ``b`` warm (a hit) and cold (``--no-cache``); compare."""
    out = tmp_path / "out"
    assert main([*command(a), "--output", str(out / "a"), "-q"]) == 0
    assert len(list((cache / "graphs").iterdir())) == 1
    assert main([*command(b), "--output", str(out / "cold"), "-q", "--no-cache"]) == 0
    forbid()
    assert main([*command(b), "--output", str(out / "warm"), "-q"]) == 0
    assert_same_package(out / "cold", out / "warm")
    assert sorted(p.name for p in (out / "warm").iterdir()) == sorted(
        p.name for p in (out / "a").iterdir()
    )
    data = [p.name for p in (out / "a").iterdir() if p.name.endswith(".data")]
    assert any((out / "warm" / n).read_bytes() != (out / "a" / n).read_bytes() for n in data)


def _build(*extra: str):
    return lambda src: ["build", "--model", src, *extra]


@pytest.fixture(scope="module")
def llamas(tmp_path_factory) -> tuple[str, str]:
    """Two tiny llama checkpoints of one config, different random weights."""
    from mobius.testing.tiny import make_checkpoint

    root = tmp_path_factory.mktemp("llamas")
    make_checkpoint("llama", root / "a", seed=0)
    make_checkpoint("llama", root / "b", seed=1)
    return str(root / "a"), str(root / "b")


def test_causal_lm(cache, tmp_path, llamas, no_cold_build):
    _pair(cache, tmp_path, _build(), *llamas, no_cold_build)


def test_int4(cache, tmp_path, llamas, no_cold_build):
    _pair(cache, tmp_path, _build("--precision", "int4"), *llamas, no_cold_build)


def test_gguf(cache, tmp_path, no_cold_build):
    from mobius.testing.gguf_files import write_tiny_llama

    a = write_tiny_llama(tmp_path / "a.gguf", seed=0)
    b = write_tiny_llama(tmp_path / "b.gguf", seed=1)
    _pair(cache, tmp_path, lambda src: ["build-gguf", src], str(a), str(b), no_cold_build)


def test_seq2seq(cache, tmp_path, no_cold_build):
    from mobius.testing.seq2seq import tiny_seq2seq

    tiny_seq2seq("t5", tmp_path / "a", seed=0)
    tiny_seq2seq("t5", tmp_path / "b", seed=1)
    _pair(cache, tmp_path, _build(), str(tmp_path / "a"), str(tmp_path / "b"), no_cold_build)


def test_vlm(cache, tmp_path, no_cold_build):
    from mobius.testing.vlm import tiny_vlm

    tiny_vlm("llava", tmp_path / "a", seed=0)
    tiny_vlm("llava", tmp_path / "b", seed=1)
    _pair(cache, tmp_path, _build(), str(tmp_path / "a"), str(tmp_path / "b"), no_cold_build)
