"""Errors that mobius reports to the user as one actionable line."""

from __future__ import annotations


class MobiusError(Exception):
    """A failure reported as one line; the CLI exits with ``exit_code`` (2: caused by the input;
    1: :class:`InternalError`, a bug in mobius)."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class SourceError(MobiusError):
    """The checkpoint cannot be found, read or trusted."""


class ConfigError(MobiusError):
    """The model config is missing, malformed or describes an impossible model."""


class WeightsError(MobiusError):
    """The weights do not match the model the config describes."""


class UnsupportedError(MobiusError):
    """The model traces, but part of it has no lowering."""


class OutputError(MobiusError):
    """The output location cannot be written."""


class StrictError(MobiusError):
    """``--strict``: the build would take a fallback that costs fused components or the cache."""


class InternalError(MobiusError):
    """A bug in mobius itself (not the input): reported as one line, exit 1; its ``__cause__``
    is the original exception (``--debug`` prints its traceback)."""

    exit_code = 1
