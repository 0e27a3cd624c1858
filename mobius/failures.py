"""Which failures may be a fallback reason, and which stop the build at once.

Three kinds of exception reach a ``try`` around torch, transformers or the hub:

- **fatal**: an interrupt (``KeyboardInterrupt``, SIGTERM as :class:`Terminated`), ``SystemExit``,
  running out of memory, or any exception whose cause chain holds one. Also any exception raised
  after the user asked to stop: torch sometimes turns a ``KeyboardInterrupt`` raised inside its
  fake-tensor code into an unrelated ``TypeError`` without chaining it, so the CLI's signal
  handlers record the request (:func:`stop_requested`) before raising. Fatal exceptions are
  re-raised as themselves (:func:`raise_if_fatal`), never turned into an error or a fallback.
- **internal**: an exception raised by mobius's own code (``mobius/``, ``patterns/``,
  ``lowering/``) that is not a :class:`~mobius.errors.MobiusError` (deliberate) nor a
  ``RuntimeError``/``NotImplementedError`` (a torch op failing under one of our shims): a bug.
  It becomes an :class:`~mobius.errors.InternalError` (exit 1).
- everything else: the model, transformers or torch.export refusing this way of tracing, which
  the caller may answer with a fallback.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

from mobius.errors import InternalError, MobiusError

# mobius's own packages: an exception raised in a file under one of these is ours
OWN_PACKAGES = ("mobius", "patterns", "lowering")
_ROOT = Path(__file__).resolve().parent.parent
_OWN_DIRS = tuple(str(_ROOT / name) + "/" for name in OWN_PACKAGES)
# raised by our code only on the way through a torch op that failed on the model's shapes
# (RuntimeError from C++ kernels, NotImplementedError for meta kernels): not a bug of ours
_TORCH_OP_FAILURES = (RuntimeError, NotImplementedError)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so the same cleanup runs; exits with 128 + 15."""

    exit_code = 128 + signal.SIGTERM


class _State:
    stop_signal: int | None = None  # the signal that asked the build to stop
    committed: bool = False  # the outcome is decided: later signals change nothing (settle)
    phase: str = "starting"


_state = _State()


def reset() -> None:
    """Forget an earlier stop request (a new build starts)."""
    _state.stop_signal = None
    _state.committed = False
    _state.phase = "starting"


def stop_requested() -> bool:
    """Whether SIGINT or SIGTERM arrived (through the handlers of :func:`install_signal_handlers`)."""
    return _state.stop_signal is not None


def stop_signal() -> int | None:
    """The signal behind the stop request, if any."""
    return _state.stop_signal


def request_stop(signum: int) -> None:
    _state.stop_signal = signum


def settle() -> None:
    """The outcome is decided (the output was renamed into place, or the CLI is reporting how
    the build ended): from now on the CLI's handlers ignore SIGINT and SIGTERM."""
    _state.committed = True


def _interrupt_for(signum: int | None) -> KeyboardInterrupt:
    if signum == signal.SIGTERM:
        return Terminated(f"signal {signum}")
    return KeyboardInterrupt()


def _on_signal(signum, frame) -> None:
    if _state.committed:
        return  # the output is in place (exit 0 is the truth) or the error is being reported
    request_stop(signum)
    raise _interrupt_for(signum)


def ignore_stop_signals() -> None:
    """The process only exits now: SIGINT and SIGTERM are ignored by the OS from here on, also
    while the interpreter shuts down (which puts Python-level handlers back to the default, so a
    signal then would kill the process after its output was already complete)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def install_signal_handlers() -> None:
    """SIGINT raises KeyboardInterrupt, SIGTERM :class:`Terminated`; both record the request first.

    Only from the main thread (Python delivers signals there alone). Also when the process
    inherited SIGINT as ignored (a job started with ``&`` by a non-interactive shell, and every
    child of it): ``kill -INT`` must still stop a build cleanly.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


@contextlib.contextmanager
def watching_interrupts() -> Iterator[None]:
    """For ``mobius.build`` called as a library: note a Ctrl-C (the default handler) as a stop
    request too, so an interrupt that torch converts is still recognised; restores the handler."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, _on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Name what the build is doing (``tracing llama``), for error messages."""
    previous, _state.phase = _state.phase, name
    try:
        yield
    except BaseException as exc:
        if not hasattr(exc, _PHASE):  # the innermost phase it escaped from
            with contextlib.suppress(AttributeError, TypeError):
                setattr(exc, _PHASE, name)
        raise
    finally:
        _state.phase = previous


_PHASE = "_mobius_phase"


def current_phase() -> str:
    return _state.phase


def phase_of(exc: BaseException) -> str:
    """The phase ``exc`` escaped from (else the current one)."""
    return getattr(exc, _PHASE, None) or current_phase()


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then its causes and contexts, each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(e for e in (current.__context__, current.__cause__) if e is not None)


def _is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return oom is not None and isinstance(exc, oom)


def _fatal_cause(exc: BaseException) -> BaseException | None:
    for link in _chain(exc):
        if isinstance(link, (KeyboardInterrupt, SystemExit)) or _is_out_of_memory(link):
            return link
    return None


def is_fatal(exc: BaseException) -> bool:
    """An interrupt, exit or out-of-memory, itself or in its cause chain, or a stop request."""
    return stop_requested() or _fatal_cause(exc) is not None


def raise_if_fatal(exc: BaseException) -> None:
    """Re-raise the fatal exception behind ``exc`` (see :func:`is_fatal`); else return."""
    cause = _fatal_cause(exc)
    if isinstance(cause, (KeyboardInterrupt, SystemExit)):
        raise cause
    if stop_requested():
        raise _interrupt_for(_state.stop_signal) from exc
    if isinstance(cause, MemoryError):
        raise cause
    if cause is not None:  # torch.OutOfMemoryError is a RuntimeError: make it a MemoryError
        raise MemoryError(str(cause).splitlines()[0] if str(cause) else "out of memory") from exc


def _raising_frame(exc: BaseException) -> traceback.FrameSummary | None:
    frames = traceback.extract_tb(exc.__traceback__)
    return frames[-1] if frames else None


def _is_own_file(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_OWN_DIRS)


def own_bug(exc: BaseException) -> BaseException | None:
    """The exception in ``exc``'s chain raised by mobius's own code as a bug, or None.

    An exception counts when the innermost frame of its traceback is in ``mobius/``,
    ``patterns/`` or ``lowering/`` and it is not a MobiusError (those are deliberate) nor a
    RuntimeError or NotImplementedError (a torch op failing on the model's shapes, called from
    one of our shims), nor raised by the call a torch-function mode of ours hands on unchanged
    (``_hands_on``)."""
    for link in _chain(exc):
        if isinstance(link, (MobiusError, *_TORCH_OP_FAILURES)):
            continue
        frame = _raising_frame(link)
        if frame is not None and _is_own_file(frame.filename) and not _hands_on(frame):
            return link
    return None


def _hands_on(frame: traceback.FrameSummary) -> bool:
    """The frame is a torch-function mode's ``return func(*args, **kwargs)``: what fails there is
    the model's own torch call (``range()`` over a tensor with no single value on meta, say)."""
    return frame.name == "__torch_function__" and (frame.line or "").startswith("return func(")


def where(exc: BaseException) -> str:
    """``module:function`` of the innermost frame in our own code (else the innermost frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if _is_own_file(f.filename)]
    frame = (own or frames or [None])[-1]
    if frame is None:
        return "unknown location"
    return f"{_module_name(Path(frame.filename).resolve())}:{frame.name}"


def _module_name(path: Path) -> str:
    """``transformers.models.llama.modeling_llama`` for a file under an import root."""
    roots = [_ROOT, *(Path(p).resolve() for p in sys.path if p)]
    for root in sorted(roots, key=lambda r: len(r.parts), reverse=True):
        if path.is_relative_to(root):
            parts = path.relative_to(root).with_suffix("").parts
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return path.stem


def internal_error(exc: BaseException, doing: str | None = None) -> InternalError:
    """One line naming what failed, where and during which step (``doing``, else the current
    phase); ``exc`` is its cause."""
    message = " ".join(str(exc).split())
    detail = f"{type(exc).__name__}: {message[:300]}" if message else type(exc).__name__
    doing = doing or phase_of(exc)
    error = InternalError(f"internal error in {where(exc)} while {doing}: {detail}")
    error.__cause__ = exc
    return error


def check(exc: BaseException) -> None:
    """For a broad ``except``: re-raise fatal exceptions and turn our own bugs into an
    InternalError; returns only for failures that mean "this way does not work"."""
    raise_if_fatal(exc)
    bug = own_bug(exc)
    if bug is not None:
        raise internal_error(bug) from exc


def format_traceback(exc: BaseException) -> str:
    """The full traceback of an internal error's cause, for ``--debug``."""
    cause = exc.__cause__ if isinstance(exc, InternalError) and exc.__cause__ else exc
    return "".join(traceback.format_exception(cause))


def stop_checkpoint() -> None:
    """Between steps: stop if a signal arrived and something swallowed its exception."""
    if stop_requested():
        raise _interrupt_for(_state.stop_signal)
