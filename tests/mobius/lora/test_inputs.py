"""``--lora-inputs`` + ``mobius adapter``: one graph, many adapters. Without an adapter the graph
is the base model; with an ``.onnx_adapter`` it equals PyTorch with that adapter merged by hand
(1e-4, float32, padded batch of two, prefill and a cached step), through onnxruntime and through
onnxruntime-genai with two adapters switched in one process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mobius.cli import main
from mobius.testing.lora import lora_parity, merged, onnx_adapter_feeds, write_adapter
from mobius.testing.parity import causal_lm_parity

ATOL = 1e-4
LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def served(checkpoints, tmp_path_factory):
    """A llama built with --lora-inputs, and two adapters (other ranks, targets, scalings)."""
    root = tmp_path_factory.mktemp("lora_inputs")
    base, model, config = checkpoints.get("llama")
    out = root / "onnx"
    assert main(["build", "--model", str(base), "--output", str(out), "--lora-inputs", "-q"]) == 0
    first = write_adapter(
        model, root / "first", LINEARS, r=4, alpha=8, seed=11, rank_pattern={"down_proj": 7}
    )
    second = write_adapter(
        model, root / "second", ["q_proj", "v_proj"], r=2, alpha=3, seed=12, use_rslora=True
    )
    for adapter in (first, second):
        assert main(["adapter", str(adapter), "--model", str(out), "-q"]) == 0
    return out, model, config, {"first": first, "second": second}


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
    out, model, config, _ = served
    parity = causal_lm_parity(model, out, config)
    assert parity["max_diff"] <= ATOL, parity


@pytest.mark.parametrize("name", ["first", "second"])
def test_each_adapter_matches_merged_torch(served, name):
    out, model, config, adapters = served
    feeds = onnx_adapter_feeds(out / f"{name}.onnx_adapter")
    parity = lora_parity(merged(model, adapters[name]), out, config, feeds)
    assert parity["max_diff"] <= ATOL, parity
    assert lora_parity(model, out, config, feeds)["max_diff"] > 0.1  # the adapter matters


def test_genai_switches_adapters_in_one_process(served):
    """Greedy tokens through onnxruntime-genai: first, second, none, first again, from one
    og.Model with both adapters loaded; each equals HF greedy on the merged (or base) model."""
    import onnxruntime_genai as og
    import torch

    from mobius.runtime.genai_adapters import GenaiAdapters

    out, model, _, adapters = served
    prompt = [5, 17, 42, 9, 3]
    references = {name: merged(model, adapter) for name, adapter in adapters.items()} | {
        None: model
    }
    genai = og.Model(str(out))
    loaded = GenaiAdapters(genai)
    seen = []
    for name in ["first", "second", None, "first"]:
        params = og.GeneratorParams(genai)
        params.set_search_options(do_sample=False, max_length=len(prompt) + 10)
        generator = og.Generator(genai, params)
        if name is not None:
            loaded.activate(generator, out / f"{name}.onnx_adapter")
        generator.append_tokens(np.array([prompt], dtype=np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        tokens = list(generator.get_sequence(0))
        with torch.no_grad():
            expected = (
                references[name]
                .generate(torch.tensor([prompt]), max_length=len(prompt) + 10, do_sample=False)[0]
                .tolist()
            )
        assert tokens == expected, name
        seen.append(tuple(tokens))
    assert len(set(seen)) == 3  # three different continuations


def test_generate_cli_with_an_adapter(served):
    from mobius.runtime.generate import genai_tokens

    out, model, _, adapters = served
    ids = [5, 17, 42, 9, 3]
    tokens = list(genai_tokens(out, ids, 6, adapter=out / "second.onnx_adapter"))
    import torch

    with torch.no_grad():
        expected = (
            merged(model, adapters["second"])
            .generate(torch.tensor([ids]), max_length=len(ids) + 6, do_sample=False)[0]
            .tolist()
        )
    assert ids + tokens == expected


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
    """MatMulNBits base weights, the LoRA path float beside them: top-1 agreement with the merged
    model at least that of the int4 base alone with the float base."""
    import onnx

    base, model, config = checkpoints.get("llama")
    out = tmp_path / "onnx"
    args = ["build", "--model", str(base), "--output", str(out), "-q"]
    assert main([*args, "--lora-inputs", "q_proj,v_proj", "--precision", "int4"]) == 0
    adapter = write_adapter(model, tmp_path / "adapter", ["q_proj", "v_proj"], seed=13)
    assert main(["adapter", str(adapter), "--model", str(out), "--name", "a", "-q"]) == 0
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert any(n.op_type == "MatMulNBits" for n in graph.node)
    lora = [n for n in graph.node if "/lora/" in n.name and n.op_type == "MatMul"]
    assert len(lora) == 2 * 2 * config.num_hidden_layers
    feeds = onnx_adapter_feeds(out / "a.onnx_adapter")
    with_adapter = _top1(merged(model, adapter), out, feeds)
    alone = _top1(model, out, {})
    assert with_adapter >= alone, (with_adapter, alone)
