"""``--adapter DIR`` folds a PEFT LoRA adapter into the weights: the ONNX model equals PyTorch
with the adapter merged by hand (``W + B @ A * scale``) at 1e-4 in float32, on a padded batch of
two, prefill and a cached decode step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mobius.cli import main
from mobius.testing.lora import merged, write_adapter
from mobius.testing.parity import causal_lm_parity, max_abs_diff

ATOL = 1e-4
LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _build(base, adapter, out, *flags: str) -> None:
    args = ["build", "--model", str(base), "--output", str(out), "-q", *flags]
    if adapter is not None:
        args += ["--adapter", str(adapter)]
    assert main(args) == 0


def test_llama_every_linear_matches_merged_torch(checkpoints, tmp_path):
    base, model, config = checkpoints.get("llama")
    adapter = write_adapter(model, tmp_path / "adapter", LINEARS, r=4, alpha=8, seed=1)
    _build(base, adapter, tmp_path / "onnx")
    parity = causal_lm_parity(merged(model, adapter), tmp_path / "onnx", config)
    assert parity["cache"] and parity["max_diff"] <= ATOL, parity
    # the adapter matters: the base model's logits are far from these
    assert causal_lm_parity(model, tmp_path / "onnx", config)["max_diff"] > 0.1
    lora = json.loads((tmp_path / "onnx" / "mobius.json").read_text())["lora"]
    assert lora["mode"] == "folded" and lora["adapter"] == "adapter"
    assert len(lora["modules"]) == 7 * config.num_hidden_layers, lora


def test_rslora_alpha_pattern_and_embedding(checkpoints, tmp_path):
    """rslora scales by alpha / sqrt(r); alpha_pattern overrides alpha per module; an embedding's
    delta is (B @ A)^T."""
    base, model, config = checkpoints.get("qwen2")
    adapter = write_adapter(
        model,
        tmp_path / "adapter",
        ["q_proj", "v_proj", "embed_tokens"],
        r=3,
        alpha=5,
        seed=2,
        use_rslora=True,
        alpha_pattern={"v_proj": 2},
    )
    _build(base, adapter, tmp_path / "onnx")
    parity = causal_lm_parity(_merged_with_pattern(model, adapter), tmp_path / "onnx", config)
    assert parity["max_diff"] <= ATOL, parity


def _merged_with_pattern(model, adapter):
    """``merged`` with v_proj's alpha taken from alpha_pattern (rslora: alpha / sqrt(r))."""
    import json
    import math

    from safetensors.torch import load_file

    ref = merged(model, adapter)  # q_proj and the embedding right; v_proj with alpha 5
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    params = dict(ref.named_parameters())
    assert json.loads((adapter / "adapter_config.json").read_text())["use_rslora"]
    for key, a in tensors.items():
        if ".v_proj.lora_A" not in key:
            continue
        b = tensors[key.replace("lora_A", "lora_B")]
        path = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
        wrong, right = 5 / math.sqrt(a.shape[0]), 2 / math.sqrt(a.shape[0])
        params[path + ".weight"].data += (b @ a) * (right - wrong)
    return ref


def test_gpt2_conv1d_fan_in_fan_out(checkpoints, tmp_path):
    """GPT-2's Conv1D weights are [in, out]: PEFT's fan_in_fan_out delta is transposed."""
    base, model, config = checkpoints.get("gpt2")
    adapter = write_adapter(
        model, tmp_path / "adapter", ["c_attn", "c_fc"], r=2, alpha=4, fan_in_fan_out=True
    )
    _build(base, adapter, tmp_path / "onnx")
    parity = causal_lm_parity(merged(model, adapter), tmp_path / "onnx", config)
    assert parity["max_diff"] <= ATOL, parity


def test_bert_encoder(checkpoints, tmp_path):
    base, model, config = checkpoints.get("bert")
    adapter = write_adapter(model, tmp_path / "adapter", ["query", "value", "dense"], r=4, seed=3)
    _build(base, adapter, tmp_path / "onnx")
    assert max_abs_diff(merged(model, adapter), tmp_path / "onnx", config) <= ATOL


def test_modules_to_save_replace_the_base_tensors(checkpoints, tmp_path):
    base, model, config = checkpoints.get("llama")
    adapter = write_adapter(
        model, tmp_path / "adapter", ["q_proj"], seed=4, modules_to_save=["lm_head"]
    )
    _build(base, adapter, tmp_path / "onnx")
    parity = causal_lm_parity(merged(model, adapter), tmp_path / "onnx", config)
    assert parity["max_diff"] <= ATOL, parity


def test_f16_folds_in_float32_then_casts(checkpoints, tmp_path):
    base, model, config = checkpoints.get("llama")
    adapter = write_adapter(model, tmp_path / "adapter", LINEARS, seed=5)
    _build(base, adapter, tmp_path / "onnx", "--dtype", "f16")
    parity = causal_lm_parity(merged(model, adapter), tmp_path / "onnx", config)
    assert parity["max_diff"] <= 5e-2, parity


@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_fold_then_quantize_equals_quantizing_the_merged_checkpoint(
    checkpoints, tmp_path, precision
):
    base, model, config = checkpoints.get("llama")
    adapter = write_adapter(model, tmp_path / "adapter", LINEARS, seed=6)
    ref = merged(model, adapter)
    ref.save_pretrained(tmp_path / "merged")
    _build(base, adapter, tmp_path / "folded", "--precision", precision)
    _build(tmp_path / "merged", None, tmp_path / "quantized", "--precision", precision)
    from mobius.runtime.causal_lm import OnnxCausalLM
    from mobius.testing.parity import decoder_inputs

    feeds = decoder_inputs(config.vocab_size)
    ids, mask, pos = (feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    logits = [
        OnnxCausalLM(tmp_path / d).run(ids, mask, pos, OnnxCausalLM(tmp_path / d).empty_cache(2))[0]
        for d in ("folded", "quantized")
    ]
    assert np.abs(logits[0] - logits[1]).max() <= 1e-3
    # the quantized model follows the merged model, not the base
    to_merged = causal_lm_parity(ref, tmp_path / "folded", config)["max_diff"]
    assert to_merged < causal_lm_parity(model, tmp_path / "folded", config)["max_diff"] / 2


def test_vision_language_model_all_graphs(tmp_path):
    """LLaVA: the adapter's q_proj/v_proj in the vision tower and the language model, and the
    projector, folded into whichever graph holds them."""
    from mobius.testing.vlm import tiny_llava_with_processor, vlm_parity

    model, _ = tiny_llava_with_processor(tmp_path / "checkpoint")
    adapter = write_adapter(
        model, tmp_path / "adapter", ["q_proj", "v_proj", "linear_1"], r=4, seed=7
    )
    _build(tmp_path / "checkpoint", adapter, tmp_path / "onnx")
    lora = json.loads((tmp_path / "onnx" / "mobius.json").read_text())["lora"]
    assert any("vision_tower" in m for m in lora["modules"])
    assert any("language_model" in m for m in lora["modules"])
    result = vlm_parity(merged(model, adapter), tmp_path / "onnx")
    for name in ("features_diff", "prefill_diff", "decode_diff", "generate_logits_diff"):
        assert result[name] < ATOL, (name, result)
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])
