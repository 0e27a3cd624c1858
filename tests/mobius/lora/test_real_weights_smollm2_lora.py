"""SmolLM2-135M (float32 weights from the GGUF file, saved as safetensors) with seeded random LoRA
adapters: folded and as graph inputs, logits against PyTorch with the adapter merged by hand at
1e-4; onnxruntime-genai's greedy tokens with two adapters and none switched in one process; the
int4 base with a float adapter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mobius.cli import main
from mobius.testing.lora import (
    lora_parity,
    merged,
    onnx_adapter_feeds,
    save_float_checkpoint,
    write_adapter,
)
from mobius.testing.parity import causal_lm_parity

pytestmark = pytest.mark.slow

ATOL = 1e-4
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """(root, HF model, tokenizer, {adapter name: directory})."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mobius.testing.gguf import smollm2_gguf

    root = tmp_path_factory.mktemp("smollm2_lora")
    gguf = smollm2_gguf()
    hf = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    save_float_checkpoint(hf, root / "base")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(root / "base")
    adapters = {
        "first": write_adapter(
            hf, root / "first", ["q_proj", "v_proj", "down_proj"], r=8, alpha=16, seed=21, std=0.05
        ),
        "second": write_adapter(
            hf, root / "second", ["k_proj", "o_proj", "up_proj"], r=4, alpha=4, seed=22,
            std=0.05, use_rslora=True,
        ),
    }  # fmt: skip
    return root, hf, tokenizer, adapters


def test_folded_matches_merged_torch(smollm2):
    root, hf, _, adapters = smollm2
    out = root / "folded"
    args = ["build", "--model", str(root / "base"), "--output", str(out), "-q"]
    assert main([*args, "--adapter", str(adapters["first"])]) == 0
    parity = causal_lm_parity(merged(hf, adapters["first"]), out, hf.config)
    assert parity["max_diff"] <= ATOL, parity
    assert causal_lm_parity(hf, out, hf.config)["max_diff"] > 1.0


@pytest.fixture(scope="module")
def served(smollm2):
    root, _, _, adapters = smollm2
    out = root / "served"
    args = ["build", "--model", str(root / "base"), "--output", str(out), "-q"]
    assert main([*args, "--lora-inputs"]) == 0
    for adapter in adapters.values():
        assert main(["adapter", str(adapter), "--model", str(out), "-q"]) == 0
    return out


def test_inputs_match_merged_torch(smollm2, served):
    _, hf, _, adapters = smollm2
    assert causal_lm_parity(hf, served, hf.config)["max_diff"] <= ATOL
    for name, adapter in adapters.items():
        feeds = onnx_adapter_feeds(served / f"{name}.onnx_adapter")
        parity = lora_parity(merged(hf, adapter), served, hf.config, feeds)
        assert parity["max_diff"] <= ATOL, (name, parity)


def test_genai_greedy_with_two_adapters_and_none(smollm2, served):
    import onnxruntime_genai as og

    from mobius.lora.genai_adapters import GenaiAdapters

    _, hf, tokenizer, adapters = smollm2
    ids = tokenizer(PROMPT)["input_ids"]
    new = 12
    references = {name: merged(hf, a) for name, a in adapters.items()} | {None: hf}
    model = og.Model(str(served))
    loaded = GenaiAdapters(model)
    seen = set()
    for name in ["first", None, "second", "first"]:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(ids) + new)
        generator = og.Generator(model, params)
        if name is not None:
            loaded.activate(generator, served / f"{name}.onnx_adapter")
        generator.append_tokens(np.array([ids], dtype=np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        tokens = [int(t) for t in generator.get_sequence(0)]
        with torch.no_grad():
            expected = (
                references[name]
                .generate(torch.tensor([ids]), max_length=len(ids) + new, do_sample=False)[0]
                .tolist()
            )
        assert tokens == expected, (name, tokenizer.decode(tokens), tokenizer.decode(expected))
        seen.add(tuple(tokens))
    assert len(seen) == 3


def test_int4_base_with_a_float_adapter(smollm2):
    """Top-1 agreement with the merged model at least that of the int4 base alone with HF."""
    from mobius.runtime import OnnxCausalLM
    from mobius.testing.parity import decoder_inputs

    root, hf, _, adapters = smollm2
    out = root / "int4"
    args = ["build", "--model", str(root / "base"), "--output", str(out), "-q"]
    assert main([*args, "--lora-inputs", "--precision", "int4"]) == 0
    assert main(["adapter", str(adapters["first"]), "--model", str(out), "-q"]) == 0
    lm = OnnxCausalLM(out)
    inputs = decoder_inputs(hf.config.vocab_size, length=48)
    ids, mask, pos = (inputs[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    keep = mask.astype(bool)

    def top1(reference, feeds) -> float:
        logits, _ = lm.run(ids, mask, pos, {**lm.empty_cache(2), **feeds})
        with torch.no_grad():
            expected = reference(**inputs).logits.numpy()
        return float((logits.argmax(-1) == expected.argmax(-1))[keep].mean())

    alone = top1(hf, {})
    feeds = onnx_adapter_feeds(out / "first.onnx_adapter")
    with_adapter = top1(merged(hf, adapters["first"]), feeds)
    print(f"top-1 agreement: int4 base {alone:.3f}, int4 base + adapter {with_adapter:.3f}")
    assert with_adapter >= alone - 0.02, (with_adapter, alone)
