"""Task detection for a text sub-config that AutoModelForCausalLM reaches through its parent."""

from __future__ import annotations

import pytest

from mobius.sources.config import from_hf
from mobius.tasks.detect import detect_task
from mobius.testing.configs import tiny_config_for


@pytest.mark.parametrize("model_type", ["emu3", "mllama"])
def test_nested_text_config_is_causal_lm_and_builds(model_type):
    text = tiny_config_for(model_type).get_text_config()
    arch = from_hf(text)
    task = detect_task(arch)
    assert task.name == "text-generation"
    model = task.auto_class(arch).from_config(text, attn_implementation="eager")
    assert type(model).__name__.endswith("ForCausalLM")


def test_plain_encoder_type_stays_feature_extraction():
    assert detect_task(from_hf(tiny_config_for("vit"))).name == "feature-extraction"
