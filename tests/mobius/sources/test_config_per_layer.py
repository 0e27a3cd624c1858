"""Configs whose sizes vary by layer (transformers 5's ``per_layer_config``).

Reading such a size from the config itself raises ``AmbiguousGlobalPerLayerAttributeError``;
mobius reads it per layer: validation and limits, explain's attributes, and the cache's shapes.
The default configs are checked without tracing (they are full-size) except Gemma 4's text model
through ``mobius explain``; tiny configs that keep the per-layer differences are converted and
compared with PyTorch (prefill, then a decode step on the cache, atol 1e-4).
"""

from __future__ import annotations

import json
import warnings

import pytest

import mobius
from mobius.cli import main
from mobius.errors import ConfigError
from mobius.sources.config import from_hf, hf_config_from_dict, position_limit
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.configs import tiny_config_for
from mobius.testing.parity import OnnxCausalLM, causal_lm_parity, max_abs_diff
from mobius.testing.tiny import randomize

ATOL = 1e-4

# every type whose default config (or a sub-config of it) varies sizes by layer, with what varies
# (step3p5/step3p7 set an empty per_layer_config: heterogeneous in form, nothing varies)
HETEROGENEOUS = {
    "diffusion_gemma": {"text_config": ["head_dim"]},
    "diffusion_gemma_text": {"": ["head_dim"]},
    "dots3_note": {
        "text_config": [
            "kv_lora_rank",
            "num_attention_heads",
            "num_key_value_heads",
            "qk_nope_head_dim",
        ],
        "vision_config": ["num_local_experts"],
    },
    "dots3_note_text": {
        "": ["kv_lora_rank", "num_attention_heads", "num_key_value_heads", "qk_nope_head_dim"]
    },
    "dots3_note_vision_encoder": {"": ["num_local_experts"]},
    "embedding_gemma2": {"text_config": ["head_dim", "num_key_value_heads"]},
    "embedding_gemma2_text": {"": ["head_dim", "num_key_value_heads"]},
    "gemma4": {"text_config": ["head_dim"]},
    "gemma4_text": {"": ["head_dim"]},
    "gemma4_unified": {"text_config": ["head_dim"]},
    "gemma4_unified_assistant": {"text_config": ["head_dim"]},
    "gemma4_unified_text": {"": ["head_dim"]},
    "neomme": {"": ["sliding_window"]},
    "step3p5": {"": []},
    "step3p7": {"text_config": []},
}


def _heterogeneous_parts(config, path: str = "") -> dict[str, list[str]]:
    found = {}
    if getattr(config, "is_heterogeneous", False):
        found[path] = sorted(config.per_layer_attributes)
    for key, value in vars(config).items():
        if hasattr(value, "per_layer_config") and hasattr(value, "to_dict"):
            found.update(_heterogeneous_parts(value, key))
    return found


def test_the_list_is_every_heterogeneous_default():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type in CONFIG_MAPPING:
            try:
                config = CONFIG_MAPPING[model_type]()
            except Exception:  # defaults that do not validate (gemma4_assistant): nothing to read
                continue
            if parts := _heterogeneous_parts(config):
                found[model_type] = parts
    assert found == HETEROGENEOUS


def _default_dict(model_type: str) -> dict:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return json.loads(CONFIG_MAPPING[model_type]().to_json_string())


@pytest.mark.parametrize("model_type", HETEROGENEOUS)
def test_default_config_is_read_per_layer(model_type):
    arch = from_hf(hf_config_from_dict(_default_dict(model_type)))
    varying = HETEROGENEOUS[model_type].get("text_config", HETEROGENEOUS[model_type].get(""))
    for name in ("head_dim", "num_attention_heads", "num_key_value_heads"):
        value = getattr(arch, name)
        if name in varying:
            assert isinstance(value, tuple) and len(value) == arch.num_layers, (name, value)
            assert len(set(value)) > 1
            assert [arch.at_layer(name, i) for i in range(arch.num_layers)] == list(value)
        elif value is not None:
            assert isinstance(value, int), (name, value)
    assert position_limit(arch.hf_config) is None or position_limit(arch.hf_config) > 0


def test_gemma4_head_dim_per_layer():
    arch = from_hf(hf_config_from_dict(_default_dict("gemma4_text")))
    types = arch.hf_config.layer_types
    assert arch.head_dim == tuple(512 if t == "full_attention" else 256 for t in types)


def test_explain_default_gemma4_reports_head_dim_per_layer(tmp_path, capsys):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    CONFIG_MAPPING["gemma4_text"]().save_pretrained(tmp_path / "ckpt")
    code = main(["explain", "--model", str(tmp_path / "ckpt"), "--json", str(tmp_path / "e.json")])
    assert code == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "e.json").read_text())
    dims = {}
    for module in report["modules"]:
        for component in module.get("components", []):
            if component["component"] == "Attention":
                layer = int(module["path"].split(".")[2])
                dims[layer] = component["attributes"]["head_dim"]
    types = CONFIG_MAPPING["gemma4_text"]().layer_types
    assert dims == {i: 512 if t == "full_attention" else 256 for i, t in enumerate(types)}


# --- validation of per-layer sizes -------------------------------------------------------------


def _tiny_gemma4_dict(**per_layer) -> dict:
    raw = json.loads(tiny_config_for("gemma4_text").to_json_string())
    raw["per_layer_config"] = {"1": per_layer}
    return raw


@pytest.mark.parametrize(
    ("per_layer", "words"),
    [
        ({"head_dim": 10**9}, ("per_layer_config.1.head_dim=1000000000", "out of range")),
        ({"head_dim": "wide"}, ("per_layer_config.1.head_dim", "must be an integer")),
        ({"num_key_value_heads": 3}, ("per_layer_config.1.num_attention_heads=4", "=3")),
    ],
)
def test_bad_per_layer_size_is_refused(per_layer, words):
    with pytest.raises(ConfigError) as error:
        hf_config_from_dict(_tiny_gemma4_dict(**per_layer))
    for word in words:
        assert word in str(error.value)


def test_per_layer_size_is_refused_by_the_cli(tmp_path, capsys):
    (tmp_path / "ckpt").mkdir()
    config = _tiny_gemma4_dict(head_dim=0)
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    code = main(["explain", "--model", str(tmp_path / "ckpt"), "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("mobius: error: ") and len(err.splitlines()) == 1
    assert "per_layer_config.1.head_dim=0" in err


def test_position_limit_per_layer():
    config = tiny_config_for("llama", per_layer_config={1: {"max_position_embeddings": 64}})
    assert position_limit(config) == 64


# --- parity of tiny heterogeneous models -------------------------------------------------------


@pytest.mark.parametrize("model_type", ["gemma4_text", "dots3_note_text"])
def test_causal_lm_parity_with_sizes_varying_by_layer(model_type, tmp_path):
    model, config = tiny_causal_lm(model_type)
    assert config.per_layer_attributes, "the tiny config lost its per-layer sizes"
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    result = causal_lm_parity(model, out, config)
    assert result["cache"] and result["max_diff"] <= ATOL, result
    if model_type == "gemma4_text":  # the cache of the full-attention layer is wider
        cache = OnnxCausalLM(out).empty_cache(1)
        head_dims = [layer.head_dim for layer in config.per_layer_config]
        assert head_dims == [16, 32]
        for i, head_dim in enumerate(head_dims):
            assert cache[f"past_key_values.{i}.key"].shape[-1] == head_dim


@pytest.mark.parametrize("model_type", ["embedding_gemma2_text", "neomme"])
def test_encoder_parity_with_sizes_varying_by_layer(model_type, tmp_path):
    import torch
    from transformers import AutoModel

    config = tiny_config_for(model_type)
    assert config.per_layer_attributes, "the tiny config lost its per-layer sizes"
    torch.manual_seed(0)
    model = AutoModel.from_config(config, attn_implementation="eager").float().eval()
    model = randomize(model, seed=0)
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    assert max_abs_diff(model, out, config) <= ATOL
