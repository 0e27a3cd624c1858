"""A model the captured attention cannot trace (it reads the mask itself) falls back, without a cache."""

import pytest
import torch

from mobius.errors import UnsupportedError
from mobius.synth import prepare as prepare_mod


class _Task:
    attention_implementations = ("mobius", "sdpa", "eager")


def _fake_trace(fails_with: set[str]):
    calls = []

    def trace(arch, task, dtype, implementations=None):
        implementations = implementations or task.attention_implementations
        calls.append(implementations)
        if implementations[0] in fails_with:
            raise UnsupportedError(f"torch.export could not trace {implementations[0]} (TypeError)")
        return f"traced with {implementations[0]}"

    return trace, calls


def test_falls_back_to_transformers_attention(monkeypatch):
    trace, calls = _fake_trace({"mobius"})
    monkeypatch.setattr(prepare_mod, "trace", trace)
    traced, blocker = prepare_mod._trace_or_fall_back(None, _Task(), torch.float32)
    assert traced == "traced with sdpa"
    assert calls == [("mobius", "sdpa", "eager"), ("sdpa", "eager")]
    assert "captured attention" in blocker and "mobius (TypeError)" in blocker


def test_no_fallback_needed(monkeypatch):
    trace, calls = _fake_trace(set())
    monkeypatch.setattr(prepare_mod, "trace", trace)
    assert prepare_mod._trace_or_fall_back(None, _Task(), torch.float32) == (
        "traced with mobius",
        None,
    )
    assert len(calls) == 1


def test_both_fail_reports_the_first_error(monkeypatch):
    trace, _ = _fake_trace({"mobius", "sdpa"})
    monkeypatch.setattr(prepare_mod, "trace", trace)
    with pytest.raises(UnsupportedError, match="trace mobius"):
        prepare_mod._trace_or_fall_back(None, _Task(), torch.float32)
