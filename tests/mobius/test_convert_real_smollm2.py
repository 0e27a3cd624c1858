"""SmolLM2-135M-Instruct (Q4_1 GGUF) end to end: the shared real-weight checks
(``real_weights_cases.py``), and the answers the README's first command prints."""

from __future__ import annotations

import pytest

from tests.mobius.real_weights_cases import *  # noqa: F403 (the shared checks run here on SmolLM2)
from tests.mobius.real_weights_cases import PROMPTS, RealModel

pytestmark = pytest.mark.slow


@pytest.fixture
def real_model(real_models) -> RealModel:
    return real_models("smollm2")


def test_smollm2_knows_paris(real_models):
    model = real_models("smollm2")
    answer = model.tokenizer.decode(model.hf_tokens([PROMPTS[0]])[0])
    assert answer.startswith(" Paris"), answer


@pytest.mark.parametrize("runtime", ["genai", "onnxruntime"])
def test_smollm2_chat_answers_paris(real_models, runtime):
    """What the README's first command prints: the chat template applied, greedy, through the CLI's
    code path, on both runtimes."""
    from mobius.runtime.generate import generate

    model = real_models("smollm2")
    pieces = generate(
        model.onnx_dir, "What is the capital of France?", max_new_tokens=16, runtime=runtime
    )
    assert "".join(pieces).strip() == "The capital of France is Paris."
