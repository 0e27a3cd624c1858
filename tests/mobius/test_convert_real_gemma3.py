"""Gemma3-270M (Q4_K_M GGUF) end to end: the shared real-weight checks
(``real_weights_cases.py``). The genai builder cannot export this model at all.

A ``sweep`` check (``python -m pytest -m sweep``): CI runs the same checks on SmolLM2's GGUF file
(``test_convert_real_smollm2.py``); Gemma3's build alone takes 90 s of a CI worker, 56 s of it
parsing the GGUF file's 262k-token vocabulary twice (mobius's config and tokenizer, and HF's
reference load, both through ``gguf.GGUFReader``)."""

from __future__ import annotations

import pytest

from tests.mobius.real_weights_cases import *  # noqa: F403 (the shared checks run here on Gemma3)
from tests.mobius.real_weights_cases import RealModel

pytestmark = [pytest.mark.slow, pytest.mark.sweep]


@pytest.fixture
def real_model(real_models) -> RealModel:
    return real_models("gemma3")
