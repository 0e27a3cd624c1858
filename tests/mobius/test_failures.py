"""mobius.failures: which exceptions are fatal, which are our own bugs, and the rest."""

from __future__ import annotations

import json
import signal

import pytest
import torch

from mobius import failures
from mobius.errors import InternalError, UnsupportedError


@pytest.fixture(autouse=True)
def _clean_state():
    failures.reset()
    yield
    failures.reset()


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the point is to look at any exception
        return exc
    raise AssertionError("did not raise")


def _chained(outer: type[Exception], inner: BaseException) -> BaseException:
    def raise_it():
        try:
            raise inner
        except BaseException as exc:
            raise outer("wrapped") from exc

    return _raised(raise_it)


def _in_context(outer: type[Exception], inner: BaseException) -> BaseException:
    def raise_it():
        try:
            raise inner
        except BaseException:
            raise outer("while handling")  # noqa: B904 - the context is the point

    return _raised(raise_it)


@pytest.mark.parametrize(
    "fatal",
    [KeyboardInterrupt(), failures.Terminated("signal 15"), SystemExit(3), MemoryError()],
)
def test_fatal_itself_and_anywhere_in_the_chain(fatal):
    assert failures.is_fatal(fatal)
    assert failures.is_fatal(_chained(TypeError, fatal))  # raise ... from
    assert failures.is_fatal(_in_context(RuntimeError, fatal))  # raised while handling it
    deep = _chained(UnsupportedError, _chained(ValueError, fatal))
    assert failures.is_fatal(deep)


def test_torch_out_of_memory_is_fatal_and_becomes_memory_error():
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
    wrapped = _chained(RuntimeError, oom)
    assert failures.is_fatal(wrapped)
    with pytest.raises(MemoryError, match="Tried to allocate"):
        failures.raise_if_fatal(wrapped)


def test_ordinary_errors_are_not_fatal():
    for exc in (TypeError("x"), _chained(ValueError, KeyError("k")), UnsupportedError("no")):
        assert not failures.is_fatal(exc)
        failures.raise_if_fatal(exc)  # returns


def test_raise_if_fatal_reraises_the_interrupt_itself():
    interrupt = failures.Terminated("signal 15")
    with pytest.raises(failures.Terminated) as caught:
        failures.raise_if_fatal(_chained(TypeError, interrupt))
    assert caught.value is interrupt


@pytest.mark.parametrize(
    ("signum", "kind"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, failures.Terminated)]
)
def test_a_stop_request_makes_any_error_fatal(signum, kind):
    # torch can turn the KeyboardInterrupt into an unrelated, unchained TypeError
    unrelated = TypeError("'NoneType' object is not iterable")
    assert not failures.is_fatal(unrelated)
    failures.request_stop(signum)
    assert failures.is_fatal(unrelated)
    with pytest.raises(kind):
        failures.raise_if_fatal(unrelated)
    with pytest.raises(kind):
        failures.stop_checkpoint()


def test_own_bug_is_an_exception_raised_in_our_code():
    from patterns import rms_norm

    ours = _raised(lambda: rms_norm.match(None))  # AttributeError inside patterns/rms_norm.py
    assert failures.own_bug(ours) is ours
    assert failures.where(ours) == "patterns.rms_norm:match"
    # the same bug seen through a wrapper raised by torch or transformers
    assert failures.own_bug(_chained(ValueError, ours)) is ours


def test_errors_from_other_code_or_deliberate_ones_are_not_our_bugs():
    assert failures.own_bug(_raised(lambda: json.loads("{"))) is None  # raised in the json module
    assert failures.own_bug(UnsupportedError("the model cannot ...")) is None
    # a torch op failing on the model's shapes, called from one of our shims
    assert failures.own_bug(_raised(lambda: torch.zeros(2, 3) @ torch.zeros(2, 3))) is None


def test_a_torch_call_failing_where_our_mode_hands_it_on_is_not_our_bug():
    from mobius.synth.shims import ScalarFillsOnMeta

    def range_over_a_pair():  # the model's own code: no index from two elements
        with ScalarFillsOnMeta():
            range(torch.tensor([1, 2]))

    exc = _raised(range_over_a_pair)
    assert isinstance(exc, TypeError)
    assert failures.where(exc) == "mobius.synth.shims:__torch_function__"
    assert failures.own_bug(exc) is None


def test_check_turns_our_bug_into_one_line_internal_error():
    from patterns import rms_norm

    ours = _raised(lambda: rms_norm.match(None))
    with failures.phase("tracing llama"), pytest.raises(InternalError) as caught:
        failures.check(_chained(RuntimeError, ours))
    message = str(caught.value)
    assert message.startswith("internal error in patterns.rms_norm:match while tracing llama: ")
    assert "AttributeError" in message and "\n" not in message
    assert caught.value.exit_code == 1
    assert "Traceback" in failures.format_traceback(caught.value)


def test_check_lets_other_failures_through():
    failures.check(_raised(lambda: json.loads("{")))  # returns: the caller may fall back


def test_signals_after_the_outcome_is_settled_are_ignored():
    with pytest.raises(KeyboardInterrupt):
        failures._on_signal(signal.SIGINT, None)
    failures.reset()
    failures.settle()
    failures._on_signal(signal.SIGINT, None)  # returns: the output is already in place
    assert not failures.stop_requested()


def test_where_names_the_module_of_code_outside_mobius():
    exc = _raised(lambda: json.loads("{"))
    assert failures.where(exc).startswith("json.decoder:")
