"""``--lora-inputs`` + ``mobius adapter``: one graph, many adapters. Without an adapter the graph
is the base model; with an ``.onnx_adapter`` it equals HF PEFT's ``PeftModel`` with that adapter
(made and saved by PEFT) at 1e-4 in float32 (padded batch of two, prefill and a cached step),
through onnxruntime and through onnxruntime-genai with two adapters switched in one process, as
PEFT switches them (``set_adapter``, ``disable_adapter``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mobius.cli import main
from mobius.testing.lora import lora_parity, onnx_adapter_feeds
from mobius.testing.parity import causal_lm_parity
from mobius.testing.peft_adapters import PeftAdapters, greedy, peft_adapter, peft_model

ATOL = 1e-4


@pytest.fixture(scope="module")
def served(checkpoints, tmp_path_factory):
    """A llama built with --lora-inputs, two PEFT adapters (other ranks, targets, scalings) as
    .onnx_adapter files, and both loaded into one PeftModel."""
    root = tmp_path_factory.mktemp("lora_inputs")
    base, model, config = checkpoints.get("llama")
    out = root / "onnx"
    assert main(["build", "--model", str(base), "--output", str(out), "--lora-inputs", "-q"]) == 0
    adapters = {
        "first": peft_adapter(
            model,
            root / "first",
            seed=11,
            target_modules="all-linear",
            r=4,
            lora_alpha=8,
            rank_pattern={"down_proj": 7},
        ),
        "second": peft_adapter(
            model,
            root / "second",
            seed=12,
            target_modules=["q_proj", "v_proj"],
            r=2,
            lora_alpha=3,
            use_rslora=True,
        ),
    }
    for adapter in adapters.values():
        assert main(["adapter", str(adapter), "--model", str(out), "-q"]) == 0
    return out, model, config, PeftAdapters(model, adapters)


def test_inputs_by_the_contract(served):
    out, _, config, _ = served
    manifest = json.loads((out / "mobius.json").read_text())
    modules = manifest["lora_inputs"]["modules"]
    assert len(modules) == 7 * config.num_hidden_layers
    assert modules["model.layers.0.self_attn.k_proj"] == [32, 64]
    import onnx

    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    inputs = {i.name: i for i in graph.input}
    a = inputs["model.layers.0.self_attn.k_proj.lora_A.weight"].type.tensor_type.shape.dim
    b = inputs["model.layers.0.self_attn.k_proj.lora_B.weight"].type.tensor_type.shape.dim
    rank = "model.layers.0.self_attn.k_proj.lora_rank"  # one per module: ranks differ
    assert [d.dim_param or d.dim_value for d in a] == [rank, 64]
    assert [d.dim_param or d.dim_value for d in b] == [32, rank]
    defaults = {i.name: list(i.dims) for i in graph.initializer if ".lora_" in i.name}
    assert defaults["model.layers.0.self_attn.k_proj.lora_A.weight"] == [0, 64]
    assert defaults["model.layers.0.self_attn.k_proj.lora_B.weight"] == [32, 0]


def test_without_an_adapter_the_graph_is_the_base(served):
    out, _, config, peft = served
    with peft.use(None) as model:
        parity = causal_lm_parity(model, out, config)
    assert parity["max_diff"] <= ATOL, parity


@pytest.mark.parametrize("name", ["first", "second"])
def test_each_adapter_matches_peft(served, name):
    out, base, config, peft = served
    feeds = onnx_adapter_feeds(out / f"{name}.onnx_adapter")
    with peft.use(name) as model:
        parity = lora_parity(model, out, config, feeds)
    assert parity["max_diff"] <= ATOL, parity
    assert lora_parity(base, out, config, feeds)["max_diff"] > 0.1  # the adapter matters


def test_genai_switches_adapters_in_one_process(served):
    """Greedy tokens through onnxruntime-genai: first, second, none, first again, from one
    og.Model with both adapters loaded; each equals PEFT's greedy tokens with that adapter
    active (or none)."""
    import onnxruntime_genai as og

    from mobius.runtime.genai_adapters import GenaiAdapters

    out, _, _, peft = served
    prompt, new = [5, 17, 42, 9, 3], 10
    genai = og.Model(str(out))
    loaded = GenaiAdapters(genai)
    seen = []
    for name in ["first", "second", None, "first"]:
        params = og.GeneratorParams(genai)
        params.set_search_options(do_sample=False, max_length=len(prompt) + new)
        generator = og.Generator(genai, params)
        if name is not None:
            loaded.activate(generator, out / f"{name}.onnx_adapter")
        generator.append_tokens(np.array([prompt], dtype=np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        tokens = list(generator.get_sequence(0))
        with peft.use(name) as model:
            assert tokens == greedy(model, prompt, new), name
        seen.append(tuple(tokens))
    assert len(set(seen)) == 3  # three different continuations


def test_generate_cli_with_an_adapter(served):
    from mobius.runtime.generate import genai_tokens

    out, _, _, peft = served
    ids = [5, 17, 42, 9, 3]
    tokens = list(genai_tokens(out, ids, 6, adapter=out / "second.onnx_adapter"))
    with peft.use("second") as model:
        assert ids + tokens == greedy(model, ids, 6)


def _top1(model, out, feeds: dict, length: int = 32) -> float:
    """Share of real tokens whose argmax the ONNX model and ``model`` agree on."""
    import torch

    from mobius.runtime.causal_lm import OnnxCausalLM
    from mobius.testing.parity import decoder_inputs

    lm = OnnxCausalLM(out)
    inputs = decoder_inputs(model.config.vocab_size, length=length)
    ids, mask, pos = (inputs[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    logits, _ = lm.run(ids, mask, pos, {**lm.empty_cache(2), **feeds})
    with torch.no_grad():
        expected = model(**inputs).logits.numpy()
    keep = mask.astype(bool)
    return float((logits.argmax(-1) == expected.argmax(-1))[keep].mean())


def test_int4_base_with_a_float_adapter(checkpoints, tmp_path):
    """MatMulNBits base weights, the LoRA path float beside them: top-1 agreement with PEFT's
    model at least that of the int4 base alone with the float base."""
    import onnx

    base, model, config = checkpoints.get("llama")
    out = tmp_path / "onnx"
    args = ["build", "--model", str(base), "--output", str(out), "-q"]
    assert main([*args, "--lora-inputs", "q_proj,v_proj", "--precision", "int4"]) == 0
    adapter = peft_adapter(
        model, tmp_path / "adapter", seed=13, target_modules=["q_proj", "v_proj"]
    )
    assert main(["adapter", str(adapter), "--model", str(out), "--name", "a", "-q"]) == 0
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert any(n.op_type == "MatMulNBits" for n in graph.node)
    lora = [n for n in graph.node if "/lora/" in n.name and n.op_type == "MatMul"]
    assert len(lora) == 2 * 2 * config.num_hidden_layers
    feeds = onnx_adapter_feeds(out / "a.onnx_adapter")
    with_adapter = _top1(peft_model(model, adapter), out, feeds)
    alone = _top1(model, out, {})
    assert with_adapter >= alone, (with_adapter, alone)
