"""When no trace can carry a cache, transformers' own attention is traced without one."""

import pytest
import torch

from mobius.errors import UnsupportedError
from mobius.synth import chain


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


def test_traces_transformers_attention_without_cache(monkeypatch):
    trace, calls = _fake_trace({"mobius"})
    monkeypatch.setattr(chain, "trace", trace)
    first = UnsupportedError("torch.export could not trace mobius (TypeError)")
    traced = chain._trace_without_cache(None, _Task(), torch.float32, ("sdpa", "eager"), first)
    assert traced == "traced with sdpa"
    assert calls == [("sdpa", "eager")]


def test_both_fail_reports_the_first_error(monkeypatch):
    trace, _ = _fake_trace({"mobius", "sdpa"})
    monkeypatch.setattr(chain, "trace", trace)
    first = UnsupportedError("torch.export could not trace mobius (TypeError)")
    with pytest.raises(UnsupportedError, match="trace mobius"):
        chain._trace_without_cache(None, _Task(), torch.float32, ("sdpa", "eager"), first)
