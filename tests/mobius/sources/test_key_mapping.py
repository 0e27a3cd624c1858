"""Checkpoints saved through transformers' conversion mapping, read back as transformers' loader does.

A model whose parameters differ from its checkpoint layout saves with the mapping reversed: split
projections are fused (hrm_text's ``attn.gqkv_proj``, lara_mini's ``linear_attn.in_proj``) and
parameters renamed (deepseek_v4, converted in tests/mobius/synth/overrides/test_deepseek_v4.py; the
renaming is checked on a toy model below). Loading splits the fused tensor into every target, and keeps a
key's own name when a broad renaming would send it to no parameter (``.norm.`` -> ``.kv_norm.``
must leave ``model.norm.weight`` alone).
"""

from __future__ import annotations

import pytest
import torch
from transformers.core_model_loading import Chunk, WeightConverter, WeightRenaming

import mobius
from mobius.sources.key_mapping import KeyMapping
from mobius.testing.causal_lm import tiny_causal_lm
from mobius.testing.parity import causal_lm_parity

ATOL = 1e-4


def convert(model_type: str, tmp_path) -> dict:
    model, config = tiny_causal_lm(model_type)
    model.save_pretrained(tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    return causal_lm_parity(model, out, config)


@pytest.mark.parametrize("model_type", ["hrm_text", "lara_mini"])
def test_fused_checkpoint_tensor_is_split_into_every_target(model_type, tmp_path):
    result = convert(model_type, tmp_path)
    assert result["cache"] and result["max_diff"] <= ATOL, result


class _Toy(torch.nn.Module):
    base_model_prefix = "model"

    def __init__(self) -> None:
        super().__init__()
        self.config = None  # converters are handed the model's config
        self.norm = torch.nn.LayerNorm(4)
        self.attn = torch.nn.Module()
        self.attn.kv_norm = torch.nn.LayerNorm(4)
        self.attn.q = torch.nn.Linear(4, 2, bias=False)
        self.attn.k = torch.nn.Linear(4, 3, bias=False)


def _mapping(model: torch.nn.Module) -> KeyMapping:
    return KeyMapping(
        model=model,
        renamings=[WeightRenaming(r"\.norm\.", ".kv_norm.")],
        converters=[WeightConverter("attn.qk", ["attn.q.weight", "attn.k.weight"], [Chunk(dim=0)])],
        meta_state=model.state_dict(),
    )


def test_rename_falls_back_to_the_key_itself():
    mapping = _mapping(_Toy())
    assert mapping.rename("norm.weight") == ("norm.weight", None)
    assert mapping.rename("attn.norm.weight") == ("attn.kv_norm.weight", None)


def test_split_converter_names_and_fills_each_target():
    model = _Toy()
    model.attn.k = torch.nn.Linear(4, 2, bias=False)  # Chunk splits evenly
    mapping = _mapping(model)
    group, pattern = mapping.rename("attn.qk")
    assert (group, pattern) == ("attn.q.weight", "attn.qk")
    assert mapping.targets(group, {pattern}) == ["attn.q.weight", "attn.k.weight"]
    fused = torch.randn(4, 4)
    made = mapping.assemble(group, {pattern: [fused]})
    torch.testing.assert_close(made["attn.q.weight"], fused[:2], rtol=0, atol=0)
    torch.testing.assert_close(made["attn.k.weight"], fused[2:], rtol=0, atol=0)


def test_a_text_model_nested_one_level_deeper_is_read_as_its_parameters():
    # HF's writer saves ShieldGemma 2's text model as model.language_model.model.* (its own
    # loader does not read that back); the parameters are model.language_model.*
    from transformers import AutoModelForImageTextToText

    from mobius.synth.trace import checkpoint_key_mapper
    from mobius.testing.configs import tiny_config_for

    config = tiny_config_for("shieldgemma2", mm_tokens_per_image=4)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    mapping = checkpoint_key_mapper(model)
    nested = "model.language_model.model.layers.0.mlp.up_proj.weight"
    assert mapping.rename(nested)[0] == "model.language_model.layers.0.mlp.up_proj.weight"
    vision = "model.vision_tower.embeddings.patch_embedding.bias"  # no such level: as it was
    assert mapping.rename(vision)[0] == vision
