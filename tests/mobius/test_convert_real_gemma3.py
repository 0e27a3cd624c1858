"""Gemma3-270M (Q4_K_M GGUF) end to end: the shared real-weight checks
(``real_weights_cases.py``). The genai builder cannot export this model at all.

A ``sweep`` check (``python -m pytest -m sweep``): CI runs the same checks on SmolLM2's GGUF file
(``test_convert_real_smollm2.py``); Gemma3's fixture takes 90 s of a CI worker: mobius's build
41 s and HF's reference load 38 s, both parsing the GGUF file's 262k-token vocabulary through
``gguf.GGUFReader``."""

from __future__ import annotations

import pytest

from tests.mobius.real_weights_cases import *  # noqa: F403 (the shared checks run here on Gemma3)
from tests.mobius.real_weights_cases import RealModel

pytestmark = [pytest.mark.slow, pytest.mark.sweep]


@pytest.fixture
def real_model(real_models) -> RealModel:
    return real_models("gemma3")
