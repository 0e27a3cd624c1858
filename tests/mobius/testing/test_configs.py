"""The general tiny-config generator builds a small, runnable HF model for representative types."""

from __future__ import annotations

import pytest
import torch

from mobius.testing.configs import HIDDEN, LAYERS, VOCAB, tiny_config_for

# one of each family shape: dense GQA, learned positions, MoE, MLA, sliding/hybrid layer types,
# state-space, hybrid attention + Mamba, multimodal wrapper with a nested text_config, encoder-style
REPRESENTATIVE = [
    "llama", "gpt2", "mixtral", "deepseek_v3", "gemma3_text", "qwen3_next", "mamba2", "jamba",
    "gemma3", "bert",
]  # fmt: skip


@pytest.mark.parametrize("model_type", REPRESENTATIVE)
def test_tiny_config_builds_and_runs(model_type):
    from transformers import AutoModelForCausalLM

    config = tiny_config_for(model_type)
    text = config.get_text_config()
    assert text.vocab_size == VOCAB
    assert text.hidden_size == HIDDEN
    assert text.num_hidden_layers == LAYERS
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        ids = getattr(text, key, None)
        for token in ids if isinstance(ids, list) else [ids]:
            assert token is None or 0 <= token < VOCAB, (key, token)
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        assert len(layer_types) == LAYERS
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    assert sum(p.numel() for p in model.parameters()) < 2_000_000  # tiny
    ids = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert logits.shape[:2] == (2, 5)
    assert torch.isfinite(logits).all()


def test_moe_and_layer_lists_are_shrunk():
    config = tiny_config_for("qwen3_next")
    assert config.num_experts == 4 and config.num_experts_per_tok == 2
    assert sorted(set(config.layer_types)) == ["full_attention", "linear_attention"]
    mla = tiny_config_for("deepseek_v3")
    assert mla.kv_lora_rank < HIDDEN and mla.n_routed_experts == 4


def test_staged_vision_backbones_keep_their_stages_and_fit_the_image():
    resnet = tiny_config_for("resnet")  # 4 stages, each at most 2 blocks, at most 128 wide
    assert len(resnet.depths) == 4 and max(resnet.depths) <= 2 and max(resnet.hidden_sizes) <= 128
    swin = tiny_config_for("swin")  # every stage keeps 2x2 positions, tiled by 2x2 windows
    stride = swin.patch_size * 2 ** (len(swin.depths) - 1)
    assert swin.num_layers == len(swin.depths) and swin.image_size >= 2 * stride
    assert swin.window_size == 2 and swin.hidden_size == swin.embed_dim * 2 ** (swin.num_layers - 1)
    regnet = tiny_config_for("regnet")  # group widths still divide the narrower stages
    assert all(w % regnet.groups_width == 0 for w in regnet.hidden_sizes)


def test_overrides_win():
    assert tiny_config_for("llama", intermediate_size=96).intermediate_size == 96


@pytest.mark.parametrize(
    ("model_type", "why"),
    [
        ("dbrx", "attn_config needs rope_theta and clip_qkv that transformers reads unguarded"),
        ("xmod", "the language adapters need a default language"),
        ("musicgen", "the causal LM is built from the `decoder` sub-config"),
        (
            "blt",
            "hidden_size_global and the hash-group vocab shrink; HF's cache needs use_cache off",
        ),
    ],
)
def test_sweep_builds_and_runs(model_type, why):
    from mobius.testing.causal_lm import tiny_causal_lm
    from mobius.testing.parity import decoder_inputs, hf_feeds

    model, config = tiny_causal_lm(model_type)
    feeds = decoder_inputs(config.get_text_config().vocab_size)
    with torch.no_grad():
        logits = model(**hf_feeds(model, feeds)).logits
    assert logits.shape[:2] == (2, 7), why
    assert torch.isfinite(logits).all(), why
    assert sum(p.numel() for p in model.parameters()) < 2_000_000, why  # tiny
