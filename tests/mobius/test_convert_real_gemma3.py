"""Gemma3-270M (Q4_K_M GGUF) end to end: the shared real-weight checks
(``real_weights_cases.py``). The genai builder cannot export this model at all."""

from __future__ import annotations

import pytest

from tests.mobius.real_weights_cases import *  # noqa: F403 (the shared checks run here on Gemma3)
from tests.mobius.real_weights_cases import RealModel

pytestmark = pytest.mark.slow


@pytest.fixture
def real_model(real_models) -> RealModel:
    return real_models("gemma3")
