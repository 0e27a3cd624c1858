"""Contracts for diffusion transformers and ControlNets: filled in below."""

from __future__ import annotations

from typing import Any


def transformer_task(cls: type) -> Any:
    return None


CONTROLNET: Any = None
