"""Interrupts, out-of-memory and our own bugs are never a fallback reason; fallbacks are visible.

In process, through ``mobius.cli.main``: each failure is injected where it would really happen
(inside the model's forward while torch.export traces it, inside a pattern), and the build must
stop with the right exit status, one line, and no output.
"""

from __future__ import annotations

import json
import signal

import pytest

import mobius
from mobius import failures
from mobius.cli import main
from mobius.errors import StrictError


@pytest.fixture(autouse=True)
def _restore_log_level():
    import logging

    logger = logging.getLogger("mobius")
    level = logger.level
    yield
    logger.setLevel(level)  # signal handlers and failures' state: tests/conftest.py


def _build(directory, out, capsys, *flags: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["build", "--model", str(directory), "--output", str(out), "-q", *flags])
    return code, capsys.readouterr().err.strip().splitlines()


def _nothing_left(out) -> bool:
    return not out.exists() and not list(out.parent.glob(f".{out.name}*"))


def _break_rms_norm(monkeypatch, effect) -> list[int]:
    """Make LlamaRMSNorm.forward (the model's own code, run inside torch.export) call ``effect``."""
    from transformers.models.llama import modeling_llama

    calls = []

    def forward(self, hidden_states):
        calls.append(1)
        effect()

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", forward)
    return calls


def _memory_error():
    raise MemoryError


def _memory_error_wrapped():
    try:
        raise MemoryError
    except MemoryError as exc:
        raise RuntimeError("allocation failed in a kernel") from exc


@pytest.mark.parametrize("effect", [_memory_error, _memory_error_wrapped])
def test_out_of_memory_while_tracing_stops_the_build(
    checkpoints, tmp_path, capsys, monkeypatch, effect
):
    directory, _, _ = checkpoints.get("llama")
    calls = _break_rms_norm(monkeypatch, effect)
    out = tmp_path / "out"
    code, err = _build(directory, out, capsys)
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("mobius: error: out of memory while tracing llama")
    assert len(calls) == 1, "the build fell back to another trace after running out of memory"
    assert _nothing_left(out)


def test_exit_called_while_tracing_stops_the_build(checkpoints, tmp_path, capsys, monkeypatch):
    def exits():
        raise SystemExit(0)  # a library that exits the process: never a trace failure, never 0

    directory, _, _ = checkpoints.get("llama")
    calls = _break_rms_norm(monkeypatch, exits)
    out = tmp_path / "out"
    code, err = _build(directory, out, capsys)
    assert code == 2, err
    assert len(err) == 1 and "called exit(0) while tracing llama" in err[0], err
    assert len(calls) == 1 and _nothing_left(out)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_torch_turned_into_a_type_error_still_stops(
    checkpoints, tmp_path, capsys, monkeypatch, signum, code
):
    """The bug report: Ctrl-C surfaced in torch's fake-tensor code as an unchained TypeError."""
    directory, _, _ = checkpoints.get("llama")

    def interrupted():
        failures.request_stop(signum)  # what the CLI's handler does before raising
        raise TypeError("'NoneType' object is not iterable")

    calls = _break_rms_norm(monkeypatch, interrupted)
    out = tmp_path / "out"
    result, err = _build(directory, out, capsys)
    assert result == code, err
    assert len(err) == 1 and "the output was not written" in err[0]
    assert len(calls) == 1, "the interrupt was taken for a trace failure and a fallback traced"
    assert _nothing_left(out)


def test_an_interrupt_chained_in_another_error_stops(checkpoints, tmp_path, capsys, monkeypatch):
    directory, _, _ = checkpoints.get("llama")

    def interrupted():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise TypeError("converted") from exc

    calls = _break_rms_norm(monkeypatch, interrupted)
    out = tmp_path / "out"
    code, err = _build(directory, out, capsys)
    assert code == 130, err
    assert len(calls) == 1 and _nothing_left(out)


def test_a_bug_in_a_pattern_is_an_internal_error(checkpoints, tmp_path, capsys, monkeypatch):
    from patterns import rms_norm

    directory, _, _ = checkpoints.get("llama")
    monkeypatch.setattr(rms_norm, "_weight", lambda expr: None)  # match() then fails to unpack
    out = tmp_path / "out"
    code, err = _build(directory, out, capsys)
    assert code == 1, err
    assert len(err) == 1, err
    assert err[0].startswith("mobius: error: internal error in patterns.rms_norm:match while ")
    assert "TypeError" in err[0] and err[0].endswith(
        "rerun with --debug for the traceback and report it"
    )
    assert _nothing_left(out)

    code, err = _build(directory, out, capsys, "--debug")
    assert code == 1
    assert err[0] == "Traceback (most recent call last):"
    assert any("patterns/rms_norm.py" in line for line in err)
    assert err[-1].startswith("mobius: error: internal error in patterns.rms_norm:match")
    assert _nothing_left(out)

    capsys.readouterr()
    assert main(["explain", "--model", str(directory), "-q"]) == 1  # explain: the same line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mobius: error: internal error in patterns.rms")


def test_a_bug_in_the_captured_attention_is_not_a_fallback(
    checkpoints, tmp_path, capsys, monkeypatch
):
    """Raised inside torch.export, but by our own code: no carried-cache trace hides it."""
    from patterns import attention

    directory, _, _ = checkpoints.get("llama")
    monkeypatch.setattr(attention, "_UNSUPPORTED_KWARGS", None)  # decline_reason iterates it
    out = tmp_path / "out"
    code, err = _build(directory, out, capsys)
    assert code == 1, err
    assert len(err) == 1
    assert err[0].startswith(
        "mobius: error: internal error in patterns.attention:decline_reason while tracing llama"
    )
    assert _nothing_left(out)


def test_a_bug_in_a_component_emitter_is_an_internal_error(
    checkpoints, tmp_path, capsys, monkeypatch
):
    from patterns import rms_norm

    directory, _, _ = checkpoints.get("llama")
    monkeypatch.setattr(rms_norm, "RMSNorm", None)  # the claim's emit() calls it
    out = tmp_path / "out"
    code, err = _build(directory, out, capsys)
    assert code == 1, err
    assert len(err) == 1
    assert err[0].startswith(
        "mobius: error: internal error in patterns.rms_norm:emit while lowering"
    )
    assert "layernorm" in err[0]  # names the module being emitted
    assert _nothing_left(out)


def test_fallbacks_are_recorded_and_strict_refuses_them(checkpoints, tmp_path, capsys):
    """bloom writes its attention by hand: the trace carries the cache, attention lowered."""
    directory, _, _ = checkpoints.get("bloom")
    package = mobius.build(directory, weights=False)
    recorded = json.loads(package.texts["mobius.json"])["fallbacks"]
    assert [f["kind"] for f in recorded] == ["carried-cache"]
    assert recorded[0]["costs"] == ["fused attention"]
    assert "attention not captured in transformer.h.0.self_attention" in recorded[0]["reason"]
    report = json.loads(package.texts["explain.json"])
    assert report["summary"]["fallbacks"] == recorded

    with pytest.raises(StrictError, match="carried through the trace"):
        mobius.build(directory, weights=False, strict=True)

    out = tmp_path / "out"
    code, err = _build(directory, out, capsys, "--strict")
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("mobius: error: --strict: the build would fall back")
    assert "attention not captured" in err[0]
    assert _nothing_left(out)


def test_a_full_conversion_records_no_fallback(checkpoints, tmp_path, capsys):
    directory, _, _ = checkpoints.get("llama")
    out = tmp_path / "out"
    code, err = _build(directory, out, capsys, "--strict")
    assert code == 0, err
    assert json.loads((out / "mobius.json").read_text())["fallbacks"] == []
    assert json.loads((out / "explain.json").read_text())["summary"]["fallbacks"] == []
