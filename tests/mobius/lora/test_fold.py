"""``--adapter DIR`` folds a PEFT LoRA adapter into the weights: the ONNX model equals HF PEFT's
``PeftModel`` with that adapter (made and saved by PEFT itself, seeded random ``lora_A`` and
``lora_B``) at 1e-4 in float32, on a padded batch of two, prefill and a cached decode step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mobius.cli import main
from mobius.testing.parity import causal_lm_parity, max_abs_diff
from mobius.testing.peft_adapters import peft_adapter, peft_model

ATOL = 1e-4


def _build(base, adapter, out, *flags: str) -> None:
    args = ["build", "--model", str(base), "--output", str(out), "-q", *flags]
    if adapter is not None:
        args += ["--adapter", str(adapter)]
    assert main(args) == 0


def test_llama_all_linear_with_rank_and_alpha_patterns(checkpoints, tmp_path):
    base, model, config = checkpoints.get("llama")
    adapter = peft_adapter(
        model,
        tmp_path / "adapter",
        seed=1,
        target_modules="all-linear",
        r=4,
        lora_alpha=8,
        rank_pattern={"down_proj": 6},
        alpha_pattern={"v_proj": 3},
    )
    _build(base, adapter, tmp_path / "onnx")
    parity = causal_lm_parity(peft_model(model, adapter), tmp_path / "onnx", config)
    assert parity["cache"] and parity["max_diff"] <= ATOL, parity
    # the adapter matters: the base model's logits are far from these
    assert causal_lm_parity(model, tmp_path / "onnx", config)["max_diff"] > 0.1
    lora = json.loads((tmp_path / "onnx" / "mobius.json").read_text())["lora"]
    assert lora["mode"] == "folded" and lora["adapter"] == "adapter"
    assert len(lora["modules"]) == 7 * config.num_hidden_layers, lora


def test_rslora_and_embedding(checkpoints, tmp_path):
    """rslora scales by alpha / sqrt(r); an embedding's delta is (B @ A)^T."""
    base, model, config = checkpoints.get("qwen2")
    adapter = peft_adapter(
        model,
        tmp_path / "adapter",
        seed=2,
        target_modules=["q_proj", "v_proj", "embed_tokens"],
        r=3,
        lora_alpha=5,
        use_rslora=True,
    )
    _build(base, adapter, tmp_path / "onnx")
    parity = causal_lm_parity(peft_model(model, adapter), tmp_path / "onnx", config)
    assert parity["max_diff"] <= ATOL, parity


def test_gpt2_conv1d_fan_in_fan_out(checkpoints, tmp_path):
    """GPT-2's Conv1D weights are [in, out]: PEFT's fan_in_fan_out delta is transposed."""
    base, model, config = checkpoints.get("gpt2")
    adapter = peft_adapter(
        model,
        tmp_path / "adapter",
        seed=3,
        target_modules=["c_attn", "c_fc"],
        r=2,
        lora_alpha=4,
        fan_in_fan_out=True,
    )
    _build(base, adapter, tmp_path / "onnx")
    parity = causal_lm_parity(peft_model(model, adapter), tmp_path / "onnx", config)
    assert parity["max_diff"] <= ATOL, parity


def test_bert_encoder(checkpoints, tmp_path):
    base, model, config = checkpoints.get("bert")
    adapter = peft_adapter(
        model, tmp_path / "adapter", seed=4, target_modules=["query", "value", "dense"], r=4
    )
    _build(base, adapter, tmp_path / "onnx")
    assert max_abs_diff(peft_model(model, adapter), tmp_path / "onnx", config) <= ATOL


def test_modules_to_save_replace_the_base_tensors(checkpoints, tmp_path):
    base, model, config = checkpoints.get("llama")
    adapter = peft_adapter(
        model, tmp_path / "adapter", seed=5, target_modules=["q_proj"], modules_to_save=["lm_head"]
    )
    _build(base, adapter, tmp_path / "onnx")
    parity = causal_lm_parity(peft_model(model, adapter), tmp_path / "onnx", config)
    assert parity["max_diff"] <= ATOL, parity


def test_f16_folds_in_float32_then_casts(checkpoints, tmp_path):
    base, model, config = checkpoints.get("llama")
    adapter = peft_adapter(model, tmp_path / "adapter", seed=6, target_modules="all-linear")
    _build(base, adapter, tmp_path / "onnx", "--dtype", "f16")
    parity = causal_lm_parity(peft_model(model, adapter), tmp_path / "onnx", config)
    assert parity["max_diff"] <= 5e-2, parity


@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_fold_then_quantize_equals_quantizing_the_merged_checkpoint(
    checkpoints, tmp_path, precision
):
    """The folded int4/int8 model equals the quantized checkpoint PEFT's merge_and_unload
    writes."""
    base, model, config = checkpoints.get("llama")
    adapter = peft_adapter(model, tmp_path / "adapter", seed=7, target_modules="all-linear")
    reference = peft_model(model, adapter)
    reference.merge_and_unload().save_pretrained(tmp_path / "merged")
    reference = peft_model(model, adapter)  # merge_and_unload changed the model in place
    _build(base, adapter, tmp_path / "folded", "--precision", precision)
    _build(tmp_path / "merged", None, tmp_path / "quantized", "--precision", precision)
    from mobius.runtime.causal_lm import OnnxCausalLM
    from mobius.testing.parity import decoder_inputs

    feeds = decoder_inputs(config.vocab_size)
    ids, mask, pos = (feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    logits = []
    for name in ("folded", "quantized"):
        lm = OnnxCausalLM(tmp_path / name)
        logits.append(lm.run(ids, mask, pos, lm.empty_cache(2))[0])
    assert np.abs(logits[0] - logits[1]).max() <= 1e-3
    # the quantized model follows PEFT's model, not the base
    to_peft = causal_lm_parity(reference, tmp_path / "folded", config)["max_diff"]
    assert to_peft < causal_lm_parity(model, tmp_path / "folded", config)["max_diff"] / 2


def test_vision_language_model_all_graphs(tmp_path):
    """LLaVA: the adapter's q_proj/v_proj in the vision tower and the language model, and the
    projector, folded into whichever graph holds them."""
    from mobius.testing.vlm import tiny_llava_with_processor, vlm_parity

    model, _ = tiny_llava_with_processor(tmp_path / "checkpoint")
    adapter = peft_adapter(
        model, tmp_path / "adapter", seed=8, target_modules=["q_proj", "v_proj", "linear_1"], r=4
    )
    _build(tmp_path / "checkpoint", adapter, tmp_path / "onnx")
    lora = json.loads((tmp_path / "onnx" / "mobius.json").read_text())["lora"]
    assert any("vision_tower" in m for m in lora["modules"])
    assert any("language_model" in m for m in lora["modules"])
    # PEFT's LoRA layers inside the model (the harness looks up the language model by its class)
    result = vlm_parity(peft_model(model, adapter).get_base_model(), tmp_path / "onnx")
    for name in ("features_diff", "prefill_diff", "decode_diff", "generate_logits_diff"):
        assert result[name] < ATOL, (name, result)
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])
