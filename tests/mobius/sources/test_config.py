"""config.json values that transformers accepts must load: non-finite floats, per-layer lists."""

from __future__ import annotations

import json
import math

from mobius.sources.config import from_hf, hf_config_from_dict
from mobius.testing.configs import tiny_config_for


def roundtrip(model_type: str) -> dict:
    """The config.json that save_pretrained writes for the tiny config (special floats encoded)."""
    return json.loads(tiny_config_for(model_type).to_json_string())


def test_infinity_in_a_float_field_loads():
    raw = roundtrip("bamba")
    assert raw["time_step_limit"][1] == {"__float__": "Infinity"}
    config = hf_config_from_dict(raw)
    assert math.isinf(config.time_step_limit[1])
    assert from_hf(config).hidden_size == raw["hidden_size"]


def test_per_layer_size_list_loads():
    raw = roundtrip("gemma3n_text")
    assert isinstance(raw["intermediate_size"], list)
    arch = from_hf(hf_config_from_dict(raw))
    assert arch.num_layers == len(raw["intermediate_size"])
