"""``--lora-inputs`` beyond the plain causal LM: an encoder whose q/k/v are one packed MatMul, the
``--ep`` rewrites (``cpu``: ONNX Attention and fused norms; GroupQueryAttention with
``--precision int4`` and for the GPU providers), each against HF PEFT's ``PeftModel`` at 1e-4 in
float32; and a vision-language model's decoder graph."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from mobius.cli import main
from mobius.runtime.causal_lm import OnnxCausalLM, session
from mobius.testing.lora import SessionWithFeeds, lora_parity, onnx_adapter_feeds
from mobius.testing.parity import causal_lm_parity, contract_pairs, decoder_inputs
from mobius.testing.peft_adapters import peft_adapter, peft_model

ATOL = 1e-4


def _serve(base, out, adapter, *flags: str) -> dict:
    """Build ``base`` with --lora-inputs and ``flags``, write ``adapter`` for it; its feeds."""
    args = ["build", "--model", str(base), "--output", str(out), "-q", "--lora-inputs", *flags]
    assert main(args) == 0
    assert main(["adapter", str(adapter), "--model", str(out), "--name", "a", "-q"]) == 0
    return onnx_adapter_feeds(out / "a.onnx_adapter")


def _ops(directory) -> Counter:
    graph = onnx.load(str(directory / "model.onnx"), load_external_data=False).graph
    return Counter(n.op_type for n in graph.node)


def test_encoder_packed_qkv_gets_inputs_per_linear(checkpoints, tmp_path):
    """BERT's query/key/value are one packed MatMul: each keeps its own inputs (PEFT's names),
    their products concatenated in column order."""
    base, model, config = checkpoints.get("bert")
    adapter = peft_adapter(
        model,
        tmp_path / "adapter",
        seed=31,
        target_modules=r".*encoder.*\.(query|value|dense)",
        r=4,
    )
    feeds = _serve(base, tmp_path / "onnx", adapter)
    assert "encoder.layer.0.attention.self.key.lora_A.weight" in feeds  # rank 0: not adapted
    assert feeds["encoder.layer.0.attention.self.key.lora_A.weight"].shape[0] == 0
    sess = session(tmp_path / "onnx")

    def worst(reference, extra: dict) -> float:
        pairs = contract_pairs(
            reference, tmp_path / "onnx", config, sess=SessionWithFeeds(sess, extra)
        )
        return max(p.max_abs() for p in pairs)

    assert worst(peft_model(model, adapter).get_base_model(), feeds) <= ATOL
    assert worst(model, {}) <= ATOL
    assert worst(model, feeds) > 0.01  # the adapter matters


@pytest.fixture(scope="module")
def llama_adapter(checkpoints, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_ep")
    base, model, config = checkpoints.get("llama")
    adapter = peft_adapter(
        model, root / "adapter", seed=32, target_modules="all-linear", r=4, lora_alpha=8
    )
    return root, base, model, config, adapter, peft_model(model, adapter)


def test_ep_cpu_keeps_the_lora_path(llama_adapter):
    """``--ep cpu``: ONNX Attention and fused norms; the LoRA adds keep q/k/v unpacked."""
    root, base, model, config, adapter, reference = llama_adapter
    out = root / "cpu"
    feeds = _serve(base, out, adapter, "--ep", "cpu")
    found = _ops(out)
    assert (
        found["Attention"] == config.num_hidden_layers and found["SkipSimplifiedLayerNormalization"]
    )
    parity = lora_parity(reference, out, config, feeds)
    assert parity["max_diff"] <= ATOL, parity
    assert causal_lm_parity(model, out, config)["max_diff"] <= ATOL


def test_group_query_attention_reads_the_lora_outputs(llama_adapter):
    """``--ep webgpu --dtype f32`` (the GPU form, which runs on CPU): GroupQueryAttention takes
    q/k/v after their LoRA adds; a one-token cached step (GQA's batch limit)."""
    root, base, model, config, adapter, reference = llama_adapter
    out = root / "webgpu"
    feeds = _serve(base, out, adapter, "--ep", "webgpu", "--dtype", "f32")
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    gqa = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == config.num_hidden_layers
    assert all(name.endswith("/lora/out") for n in gqa for name in n.input[:3]), gqa[0].input
    parity = lora_parity(reference, out, config, feeds, prefill=8, length=9)
    assert parity["max_diff"] <= ATOL, parity
    assert causal_lm_parity(model, out, config, prefill=8, length=9)["max_diff"] <= ATOL


def test_ep_cpu_int4_equals_the_portable_int4_graph(llama_adapter):
    """``--ep cpu --precision int4``: packed MatMulNBits and GroupQueryAttention, the LoRA path
    float beside them; with the adapter its logits equal the portable int4 graph's (both at
    accuracy level 0, so the same weights and float activations)."""
    root, base, _, config, adapter, _ = llama_adapter
    int4 = ["--precision", "int4", "--accuracy-level", "0"]
    outs = {"cpu": root / "cpu_int4", "portable": root / "int4"}
    feeds = {
        "cpu": _serve(base, outs["cpu"], adapter, "--ep", "cpu", *int4),
        "portable": _serve(base, outs["portable"], adapter, *int4),
    }
    assert _ops(outs["cpu"])["GroupQueryAttention"] == config.num_hidden_layers
    inputs = decoder_inputs(config.vocab_size, length=9)
    ids, mask, pos = (inputs[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    logits = {}
    for name, out in outs.items():
        lm = OnnxCausalLM(out)
        prefill, cache = lm.run(
            ids[:, :8], mask[:, :8], pos[:, :8], {**lm.empty_cache(2), **feeds[name]}
        )
        step, _ = lm.run(ids[:, 8:], mask, pos[:, 8:], {**cache, **feeds[name]})
        logits[name] = np.concatenate([prefill, step], 1)[mask.astype(bool)]
    assert np.abs(logits["cpu"] - logits["portable"]).max() <= ATOL


def test_vision_language_decoder_takes_the_inputs(tmp_path):
    """LLaVA: the decoder_model graph takes LoRA inputs, the vision and embedding graphs stay
    as they are; with an adapter on the language model, features, prefill, a cached step and
    greedy generation equal PEFT's; without one, the base model's. An adapter on the vision tower
    is refused by name."""
    from mobius.runtime.vlm import OnnxVisionLanguageModel
    from mobius.testing.vlm import tiny_llava_with_processor, vlm_pairs

    model, _ = tiny_llava_with_processor(tmp_path / "checkpoint")
    adapter = peft_adapter(
        model,
        tmp_path / "adapter",
        seed=33,
        target_modules=r".*language_model.*\.(q_proj|v_proj|down_proj)",
        r=4,
        lora_alpha=8,
    )
    out = tmp_path / "onnx"
    feeds = _serve(tmp_path / "checkpoint", out, adapter)
    for graph in ("vision_encoder", "embedding"):
        graph_proto = onnx.load(str(out / f"{graph}.onnx"), load_external_data=False).graph
        names = [i.name for i in graph_proto.input]
        assert not any(".lora_" in n for n in names), (graph, names)

    def compare(reference, extra: dict) -> tuple[float, bool]:
        """Largest difference and whether the greedy tokens are equal."""
        runner = OnnxVisionLanguageModel(out)
        decoder = runner.sessions["decoder_model"]
        runner.sessions["decoder_model"] = SessionWithFeeds(decoder, extra)
        compared = vlm_pairs(reference, out, runner=runner)
        return max(p.max_abs() for p in compared.pairs), compared.tokens.equal()

    diff, tokens_equal = compare(peft_model(model, adapter).get_base_model(), feeds)
    assert diff <= ATOL and tokens_equal, diff
    diff, tokens_equal = compare(model, {})
    assert diff <= ATOL and tokens_equal, diff
    assert compare(model, feeds)[0] > 0.01  # the adapter matters
    vision = peft_adapter(
        model, tmp_path / "vision", seed=34, target_modules=r".*vision_tower.*\.q_proj"
    )
    assert main(["adapter", str(vision), "--model", str(out), "-q"]) == 2
