"""Emitters for the custom ops that patterns capture while tracing, looked up before lowerings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EMITTERS: dict[Any, Callable[..., Any]] = {}


def emits(*targets: Any) -> Callable:
    """Register the function that turns a captured op's FX node into components."""

    def register(fn: Callable) -> Callable:
        for target in targets:
            EMITTERS[target] = fn
        return fn

    return register


def find_emitter(target: Any) -> Callable[..., Any] | None:
    return EMITTERS.get(target)
