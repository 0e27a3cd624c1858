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
    unmerged,
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
        # a milder adapter, its delta a small fraction of the weights, as a fine-tune's is
        "mild": write_adapter(hf, root / "mild", ["q_proj", "v_proj"], r=8, alpha=16, seed=23, std=0.02),
    }  # fmt: skip
    return root, hf, tokenizer, adapters


def _plain_error(root, hf) -> float:
    """Max |onnxruntime - torch| of the base converted without any adapter (built once)."""
    plain = root / "plain"
    if not plain.exists():
        assert main(["build", "--model", str(root / "base"), "--output", str(plain), "-q"]) == 0
    return causal_lm_parity(hf, plain, hf.config)["max_diff"]


def test_folded_matches_merged_torch(smollm2):
    root, hf, _, adapters = smollm2
    out = root / "folded"
    args = ["build", "--model", str(root / "base"), "--output", str(out), "-q"]
    assert main([*args, "--adapter", str(adapters["first"])]) == 0
    parity = causal_lm_parity(merged(hf, adapters["first"]), out, hf.config)
    plain = _plain_error(root, hf)
    print(f"folded: {parity}; plain build without adapter {plain:.2e}")
    # the base itself converts at about 1.2e-4 over SmolLM2's 30 layers (f32 rounding)
    assert parity["max_diff"] <= max(ATOL, 2 * plain), parity
    assert causal_lm_parity(hf, out, hf.config)["max_diff"] > 1.0


@pytest.fixture(scope="module")
def served(smollm2):
    root, _, _, adapters = smollm2
    out = root / "served"
    args = ["build", "--model", str(root / "base"), "--output", str(out), "-q"]
    assert main([*args, "--lora-inputs"]) == 0
    for name, adapter in adapters.items():
        if name == "mild":
            continue
        assert main(["adapter", str(adapter), "--model", str(out), "-q"]) == 0
    return out


def test_inputs_match_merged_torch(smollm2, served):
    root, hf, _, adapters = smollm2
    base = _plain_error(root, hf)
    without = causal_lm_parity(hf, served, hf.config)["max_diff"]
    print(f"no adapter: plain build {base:.2e}, --lora-inputs build {without:.2e}")
    assert without <= max(ATOL, 1.5 * base)
    for name in ("first", "second"):
        adapter = adapters[name]
        feeds = onnx_adapter_feeds(served / f"{name}.onnx_adapter")
        # against PEFT's unmerged forward, which computes as the graph does
        parity = lora_parity(unmerged(hf, adapter), served, hf.config, feeds)
        print(f"adapter {name}: {parity}")
        assert parity["max_diff"] <= max(ATOL, 2 * base), (name, parity)


def test_genai_greedy_with_two_adapters_and_none(smollm2, served):
    import onnxruntime_genai as og

    from mobius.runtime.genai_adapters import GenaiAdapters

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
    from mobius.runtime.causal_lm import OnnxCausalLM

    root, hf, tokenizer, adapters = smollm2
    out = root / "int4"
    args = ["build", "--model", str(root / "base"), "--output", str(out), "-q"]
    assert main([*args, "--lora-inputs", "--precision", "int4"]) == 0
    assert main(["adapter", str(adapters["mild"]), "--model", str(out), "-q"]) == 0
    assert main(["adapter", str(adapters["first"]), "--model", str(out), "-q"]) == 0
    lm = OnnxCausalLM(out)
    inputs = _text_inputs(tokenizer)
    ids, mask, pos = (inputs[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    keep = mask.astype(bool)

    def top1(reference, feeds) -> float:
        logits, _ = lm.run(ids, mask, pos, {**lm.empty_cache(2), **feeds})
        with torch.no_grad():
            expected = reference(**inputs).logits.numpy()
        return float((logits.argmax(-1) == expected.argmax(-1))[keep].mean())

    alone = top1(hf, {})
    agreement = {
        name: top1(unmerged(hf, adapters[name]), onnx_adapter_feeds(out / f"{name}.onnx_adapter"))
        for name in ("mild", "first")
    }
    print(f"top-1 agreement: int4 base {alone:.3f}, int4 base + adapter {agreement}")
    assert agreement["mild"] >= alone, (agreement, alone)


TEXTS = [
    "The capital of France is Paris, and the capital of Germany is Berlin. Both cities are "
    "known for their museums, their food and their long history. Millions of visitors come "
    "every year to see the old buildings, walk along the rivers and sit in the cafes. In the "
    "evening the streets fill with people who eat late and talk about art, music and politics.",
    "Once upon a time, a little girl lived in a village near the forest. Every morning she "
    "walked to the river to fetch water for her grandmother. One day she met a fox who asked "
    "her where she was going. She told him about her grandmother, who was old and ill, and the "
    "fox promised to show her a shorter path through the trees.",
]


def _text_inputs(tokenizer) -> dict[str, torch.Tensor]:
    """Two sentences, the shorter left-padded: ids, mask and positions."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    mask = batch["attention_mask"]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": batch["input_ids"], "attention_mask": mask, "position_ids": positions}
