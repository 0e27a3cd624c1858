"""SmolLM2-135M (float32 weights from the GGUF file, saved as safetensors) with two seeded random
PEFT adapters (``lora_B`` not zero), each package built once for the module: folded and as graph
inputs, logits against HF PEFT's ``PeftModel``; onnxruntime-genai's greedy tokens with the two
adapters and none switched in one process, as PEFT switches them. The int4 base with a float
adapter and the decode cost are measured by ``benchmarks/lora_smollm2.py`` and
``benchmarks/lora_decode.py``."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.cli import main
from mobius.testing.lora import lora_parity, onnx_adapter_feeds, save_float_checkpoint
from mobius.testing.parity import causal_lm_parity
from mobius.testing.peft_adapters import PeftAdapters, greedy, peft_adapter

# a sweep check: LoRA folding is checked against PEFT on tiny models in CI (test_fold.py)
pytestmark = [pytest.mark.slow, pytest.mark.sweep]

ATOL = 1e-4
PROMPT = "The capital of France is"
ADAPTERS = {
    "first": {"target_modules": ["q_proj", "v_proj", "down_proj"], "r": 8, "lora_alpha": 16},
    "second": {
        "target_modules": ["k_proj", "o_proj", "up_proj"],
        "r": 4,
        "lora_alpha": 4,
        "use_rslora": True,
    },
}


@pytest.fixture(scope="module")
def one_torch_thread():
    """PyTorch on one thread for this module: its threads spin-wait for each other, and on a
    shared two-core machine (pytest-xdist's other worker, onnxruntime) a 135M forward then takes
    ten times as long."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory, one_torch_thread):
    """(HF model, tokenizer, PeftAdapters with both adapters, served package with both
    .onnx_adapter files, folded package of "first"), built once for the module."""
    from transformers import AutoTokenizer

    from mobius.testing.gguf import hf_from_gguf, smollm2_gguf

    root = tmp_path_factory.mktemp("smollm2_lora")
    gguf = smollm2_gguf()
    hf = hf_from_gguf(gguf, attn_implementation="eager").eval()
    base = save_float_checkpoint(hf, root / "base")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    adapters = {
        name: peft_adapter(hf, root / name, seed=21 + i, std=0.05, **config)
        for i, (name, config) in enumerate(ADAPTERS.items())
    }
    args = ["build", "--model", str(base), "-q", "--output"]
    served, folded = root / "served", root / "folded"
    assert main([*args, str(served), "--lora-inputs"]) == 0
    for adapter in adapters.values():
        assert main(["adapter", str(adapter), "--model", str(served), "-q"]) == 0
    assert main([*args, str(folded), "--adapter", str(adapters["first"])]) == 0
    return hf, tokenizer, PeftAdapters(hf, adapters), served, folded


@pytest.fixture(scope="module")
def base_error(smollm2) -> float:
    """Max |onnxruntime - torch| of the base model: the served graph fed no adapter. SmolLM2
    converts at about 1.2e-4 (float32 rounding over 30 layers), so an adapter is held to the
    larger of 1e-4 and twice that."""
    hf, _, peft, served, _ = smollm2
    with peft.use(None) as model:
        error = causal_lm_parity(model, served, hf.config)["max_diff"]
    print(f"no adapter: {error:.2e}")
    assert error <= 3 * ATOL
    return error


def test_folded_matches_peft(smollm2, base_error):
    hf, _, peft, _, folded = smollm2
    with peft.use("first") as model:
        parity = causal_lm_parity(model, folded, hf.config)
    print(f"folded: {parity}")
    assert parity["max_diff"] <= max(ATOL, 2 * base_error), parity
    assert causal_lm_parity(hf, folded, hf.config)["max_diff"] > 1.0  # the adapter matters


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_inputs_match_peft(smollm2, base_error, name):
    hf, _, peft, served, _ = smollm2
    feeds = onnx_adapter_feeds(served / f"{name}.onnx_adapter")
    with peft.use(name) as model:
        parity = lora_parity(model, served, hf.config, feeds)
    print(f"adapter {name}: {parity}")
    assert parity["max_diff"] <= max(ATOL, 2 * base_error), (name, parity)


def test_genai_greedy_with_two_adapters_and_none(smollm2):
    import onnxruntime_genai as og

    from mobius.runtime.genai_adapters import GenaiAdapters

    _, tokenizer, peft, served, _ = smollm2
    ids = tokenizer(PROMPT)["input_ids"]
    new = 12
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
        with peft.use(name) as reference:
            expected = greedy(reference, ids, new)
        assert tokens == expected, (name, tokenizer.decode(tokens), tokenizer.decode(expected))
        seen.add(tuple(tokens))
    assert len(seen) == 3
