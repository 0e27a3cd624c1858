"""--precision int4|int8: MatMulNBits graphs match PyTorch run on the same quantized weights.

The reference here quantizes and dequantizes each nn.Linear weight itself, in torch, from the
MatMulNBits definition (per block of ``block_size`` along K: asymmetric ``scale = (max(w, 0) -
min(w, 0)) / (2^bits - 1)``, ``zero = round(-min / scale)``; symmetric ``scale = max|w| / (2^(bits-1)
- 1)``, ``zero = 2^(bits-1)``; ``w ~ (clamp(round(w / scale) + zero) - zero) * scale``). It shares no
code with ``mobius.quant.blocks``. The tiny llama has hidden size 80 and MLP width 144, so every K
ends in a partial block.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
import torch

import mobius
import mobius.quant.linears
from mobius.cli import main
from mobius.quant.blocks import Scheme
from mobius.quant.linears import default_accuracy_level
from mobius.quant.moe import why_float
from mobius.report.schema import errors as schema_errors
from mobius.testing.parity import assert_left_padded_batch_matches_hf, max_abs_diff
from mobius.testing.tiny import make_checkpoint

ATOL = 1e-4
SHAPE = {"hidden_size": 80, "intermediate_size": 144}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("quant") / "llama80"
    model, config = make_checkpoint("llama", directory, tie_word_embeddings=False, **SHAPE)
    return directory, model, config


def reference_dequantized(w: torch.Tensor, bits: int, block: int, symmetric: bool) -> torch.Tensor:
    n, k = w.shape
    blocks = -(-k // block)
    padded = torch.zeros(n, blocks * block, dtype=torch.float32)
    padded[:, :k] = w.float()
    x = padded.view(n, blocks, block)
    top = (1 << bits) - 1
    if symmetric:
        zero = torch.full((n, blocks, 1), float(1 << (bits - 1)))
        scale = x.abs().amax(-1, keepdim=True) / float((1 << (bits - 1)) - 1)
    else:
        low = x.amin(-1, keepdim=True).clamp(max=0)
        high = x.amax(-1, keepdim=True).clamp(min=0)
        scale = (high - low) / float(top)
        zero = torch.round(-low / torch.where(scale == 0, 1.0, scale)).clamp(0, top)
    divisor = torch.where(scale == 0, 1.0, scale)
    q = (torch.round(x / divisor) + zero).clamp(0, top)
    return ((q - zero) * scale).view(n, -1)[:, :k]


def quantized_reference(
    model, bits: int, block: int, symmetric: bool, keep=(), embedding_too: bool = False
) -> torch.nn.Module:
    """A copy of ``model`` whose Linear weights are replaced by their reference dequantization,
    each its own Parameter: a tied lm_head no longer changes the embedding, unless
    ``embedding_too``, which gives the embedding the lm_head's dequantized weight as well."""
    ref = copy.deepcopy(model)
    for name, module in ref.named_modules():
        if isinstance(module, torch.nn.Linear) and name not in keep:
            deq = reference_dequantized(module.weight.detach(), bits, block, symmetric)
            module.weight = torch.nn.Parameter(deq)
    if embedding_too:
        ref.get_input_embeddings().weight = ref.get_output_embeddings().weight
    elif block and ref.config.hidden_size % block == 0 and not ref.config.tie_word_embeddings:
        embedding = ref.get_input_embeddings()  # an untied one is quantized on its own
        deq = reference_dequantized(embedding.weight.detach(), bits, block, symmetric)
        embedding.weight = torch.nn.Parameter(deq)
    return ref


def ops(directory: Path) -> list[str]:
    return [
        n.op_type
        for n in onnx.load(str(directory / "model.onnx"), load_external_data=False).graph.node
    ]


@pytest.mark.parametrize(
    "precision,symmetric,block", [("int4", False, 32), ("int4", True, 16), ("int8", False, 32)]
)
def test_matches_reference_dequantized_weights(
    llama, tmp_path, monkeypatch, precision, symmetric, block
):
    directory, model, config = llama
    monkeypatch.setattr(mobius.quant.linears, "SLAB_BYTES", 1000)  # a few rows per slab read
    package = mobius.build(directory, precision=precision, symmetric=symmetric, block_size=block)
    out = package.save(tmp_path / "q")
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
    bits = int(precision[-1])
    planes = 2 if bits == 8 else 1  # 8 bits run on the CPU EP as two 4-bit planes (nbits_cpu)
    assert len(nbits) == 15 * planes and "MatMul" not in ops(out)  # 7 per layer and lm_head
    # the untied embedding too, where its width (80) is whole blocks
    assert ("GatherBlockQuantized" in ops(out)) is (80 % block == 0)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nbits[0].attribute}
    assert (attrs["bits"], attrs["block_size"], attrs["accuracy_level"]) == (4, block, 0)
    ref = quantized_reference(model, bits, block, symmetric)
    assert max_abs_diff(ref, out, config) <= ATOL


def test_close_to_float_model_and_smaller(llama, tmp_path):
    """int8 is ~16x finer than int4; on random weights both stay near the float logits. The
    embedding and norms stay float in all three, so the files shrink by less than 4x and 8x."""
    directory, model, config = llama
    diffs, sizes = {}, {}
    for precision in (None, "int8", "int4"):
        out = mobius.build(directory, precision=precision).save(tmp_path / str(precision))
        diffs[precision] = max_abs_diff(model, out, config)
        sizes[precision] = (out / "model.onnx.data").stat().st_size
    print(f"max |logit diff| vs float32 torch: {diffs}; model.onnx.data bytes: {sizes}")
    assert diffs[None] <= ATOL < diffs["int8"] < diffs["int4"] / 4
    assert sizes[None] > sizes["int8"] > sizes["int4"]


def test_exclude_keeps_layers_float(llama, tmp_path):
    directory, model, config = llama
    package = mobius.build(
        directory, precision="int4", quant_exclude=["lm_head", "*.mlp.down_proj"]
    )
    out = package.save(tmp_path / "q")
    assert ops(out).count("MatMulNBits") == 12 and ops(out).count("MatMul") == 3
    record = json.loads((out / "mobius.json").read_text())["quantization"]
    assert record["excluded_weights"] == [
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "lm_head.weight",
    ]
    assert (record["bits"], record["block_size"], record["symmetric"]) == (4, 32, False)
    assert len(record["quantized_weights"]) == 12
    keep = {"lm_head", "model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"}
    assert max_abs_diff(quantized_reference(model, 4, 32, False, keep), out, config) <= ATOL
    # every weight's storage, in explain.json (schema-checked) and mobius.json alike
    explain = json.loads((out / "explain.json").read_text())
    assert schema_errors(explain) == []
    stored = {w["source"]: w for w in explain["weights"]}
    assert explain["weights"] == json.loads((out / "mobius.json").read_text())["weights"]
    assert set(stored) == set(model.state_dict())  # one entry per weight, scales inside it
    nbits = {"format": "MatMulNBits", "bits": 4, "block_size": 32, "zero_points": True}
    for key, entry in stored.items():
        kept = key in record["excluded_weights"] or "norm" in key or "embed" in key  # 80: no blocks
        expected = {"format": "float", "bits": 32, "block_size": 0, "zero_points": False}
        assert entry | (expected if kept else nbits) == entry, key


@pytest.mark.parametrize("hidden,shared", [(64, True), (80, False)])
def test_tied_embedding(tmp_path, hidden, shared):
    """A tied embedding becomes GatherBlockQuantized over the lm_head's packed bytes when the
    hidden size is whole blocks; otherwise (80 = 2.5 blocks of 32) its float copy stays."""
    directory = tmp_path / "tied"
    model, config = make_checkpoint(
        "llama", directory, tie_word_embeddings=True, hidden_size=hidden, intermediate_size=144
    )
    out = mobius.build(directory, precision="int4").save(tmp_path / "q")
    record = json.loads((out / "mobius.json").read_text())["quantization"]
    key = ["model.embed_tokens.weight"]
    assert record["embedding_shared_with_lm_head"] == (key if shared else [])
    assert record["float_weights_also_kept"] == ([] if shared else key)
    assert ("GatherBlockQuantized" in ops(out)) is shared
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert ("model.embed_tokens.weight" in {i.name for i in graph.initializer}) is not shared
    ref = quantized_reference(model, 4, 32, False, embedding_too=shared)
    assert max_abs_diff(ref, out, config) <= ATOL
    # a tied lm_head is excluded by its module path, though its weight is the embedding's key
    out = mobius.build(directory, precision="int4", quant_exclude=["lm_head"]).save(tmp_path / "x")
    record = json.loads((out / "mobius.json").read_text())["quantization"]
    assert record["excluded_weights"] == ["lm_head.weight"]
    assert "lm_head.weight" not in record["quantized_weights"]
    assert "GatherBlockQuantized" not in ops(out) and ops(out).count("MatMulNBits") == 14
    ref = quantized_reference(model, 4, 32, False, keep={"lm_head"})
    assert max_abs_diff(ref, out, config) <= ATOL


def test_cli_flags(llama, tmp_path):
    directory, model, config = llama
    out = tmp_path / "q"
    argv = ["build", "--model", str(directory), "--output", str(out), "-q", "--precision", "int8"]
    assert main([*argv, "--symmetric", "--block-size", "64", "--accuracy-level", "0"]) == 0
    record = json.loads((out / "mobius.json").read_text())["quantization"]
    assert (record["precision"], record["block_size"], record["symmetric"]) == ("int8", 64, True)
    assert max_abs_diff(quantized_reference(model, 8, 64, True), out, config) <= ATOL


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--block-size", "24"], "--block-size must be a power of two"),
        (["--dtype", "bf16"], "needs --dtype f32 or f16"),
        (["--no-weights"], "drop --no-weights"),
    ],
)
def test_bad_options_one_line(llama, tmp_path, capsys, flags, message):
    directory = llama[0]
    argv = ["build", "--model", str(directory), "--output", str(tmp_path / "q"), "-q"]
    assert main([*argv, "--precision", "int4", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mobius: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "q").exists()


def test_moe_experts_become_qmoe(tmp_path):
    """Mixtral's experts: the MoE kernel becomes QMoE over per-expert blocks, exact against the
    reference dequantization of every expert matrix (and of the router, a linear like any other)."""
    model, config = make_checkpoint("mixtral", tmp_path / "c")
    out = mobius.build(tmp_path / "c", precision="int4").save(tmp_path / "q")
    assert ops(out).count("QMoE") == config.num_hidden_layers and "MoE" not in ops(out)
    ref = quantized_reference(model, 4, 32, False)
    with torch.no_grad():
        for layer in ref.model.layers:
            router, experts = layer.mlp.gate, layer.mlp.experts
            router.weight.copy_(reference_dequantized(router.weight, 4, 32, False))
            for stacked in (experts.gate_up_proj, experts.down_proj):
                stacked.copy_(
                    torch.stack([reference_dequantized(w, 4, 32, False) for w in stacked])
                )
    assert max_abs_diff(ref, out, config) <= ATOL
    record = json.loads((out / "mobius.json").read_text())["quantization"]
    assert len(record["quantized_experts"]) == 2 * config.num_hidden_layers
    qmoe = [
        w
        for w in json.loads((out / "explain.json").read_text())["weights"]
        if w["format"] == "QMoE"
    ]
    assert {w["source"] for w in qmoe} == set(record["quantized_experts"])
    assert all((w["bits"], w["block_size"], w["zero_points"]) == (4, 32, True) for w in qmoe)


def test_ep_cpu_packs_projections(llama, tmp_path):
    """``--ep cpu``: q/k/v (packed in float, then quantized as one) and gate/up (packed after
    quantization, ``mobius.quant.nbits_pack``) are one MatMulNBits each, with the same values; every
    checkpoint weight still has its entry in the weights record. Head size 20 keeps ONNX
    Attention (onnxruntime's CPU GroupQueryAttention wants multiples of 16), with the reason."""
    directory, model, config = llama
    package = mobius.build(directory, precision="int4", ep="cpu", accuracy_level=0)
    out = package.save(tmp_path / "q")
    # per layer: q/k/v, o, gate/up, down; and the lm_head (no flatten/unflatten Reshape around it)
    found = ops(out)
    assert found.count("MatMulNBits") == 4 * 2 + 1 and found.count("Split") == 2 * 2
    assert found.count("Attention") == 2 and "GroupQueryAttention" not in found
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert [n.op_type for n in graph.node if "logits" in n.output] == ["MatMulNBits"]
    shared = [i for i in graph.initializer if i.name.startswith("matmulnbits_split_sizes")]
    assert len(shared) == 1  # both layers' gate/up Splits read one
    info = json.loads((out / "mobius.json").read_text())
    assert all("head size 20" in why for why in info["ep"]["generic_attention"].values())
    assert info["matmulnbits_packed"] == [
        [f"model.layers.{i}.mlp.{p}_proj.weight" for p in ("gate", "up")] for i in range(2)
    ]
    keys = [k for w in info["weights"] for k in w["source"].split(",")]
    assert sorted(keys) == sorted(model.state_dict())
    # the graph's own record names the initializers it has (not those before quantization)
    saved = onnx.load(str(out / "model.onnx"), load_external_data=False)
    sources = json.loads({p.key: p.value for p in saved.metadata_props}["mobius.weight_sources"])
    assert sources == {w["name"]: w["source"] for w in info["weights"] if w["name"] != w["source"]}
    assert set(sources) <= {i.name for i in saved.graph.initializer}
    assert max_abs_diff(quantized_reference(model, 4, 32, False), out, config) <= ATOL


def test_default_accuracy_level():
    """int8 activations by default only where the graph is tuned for the CPU and the weights are
    rounded by ``--precision`` anyway (the choice is measured in docs/benchmarks.md)."""
    assert default_accuracy_level("cpu", "int4") == 4
    assert default_accuracy_level(None, "int4") == 0  # the portable graph: exact
    assert default_accuracy_level("cpu", None) == 0  # GGUF/GPTQ/AWQ blocks: exact


def test_ep_cpu_moves_qkv_bias_into_matmulnbits(tmp_path):
    """Qwen2's q/k/v bias: packed with the weights, then the packed MatMulNBits' ``bias`` input
    (``nbits_pack.fuse_biases``), not an ``Add`` after it; same values. Head size 16: the packed
    q/k/v go to GroupQueryAttention with rotary inside, its cos/sin caches computed in the graph
    (no initializer), exact on a left-padded batch, a cached step and greedy tokens."""
    model, config = make_checkpoint("qwen2", tmp_path / "c", head_dim=16, **SHAPE)
    out = mobius.build(tmp_path / "c", precision="int4", ep="cpu", accuracy_level=0).save(
        tmp_path / "q"
    )
    found = ops(out)
    assert found.count("GroupQueryAttention") == config.num_hidden_layers
    assert "Attention" not in found and "RotaryEmbedding" not in found
    assert found.count("Split") == config.num_hidden_layers  # gate/up only
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert not {"cos_cache", "sin_cache"} & {i.name for i in graph.initializer}
    with_bias = [n for n in graph.node if n.op_type == "MatMulNBits" and len(n.input) == 6]
    assert len(with_bias) == config.num_hidden_layers
    assert all(n.input[5].endswith("qkv_proj.bias") for n in with_bias)
    assert "Add" not in ops(out)
    # prefill (left-padded batch), a cached step and greedy tokens, at 1e-4 (= ATOL)
    assert_left_padded_batch_matches_hf(out, quantized_reference(model, 4, 32, False), new=1)


def _int8_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """``x`` rounded to int8 per ``block`` elements of its last axis (symmetric, ``max|x| / 127``),
    as onnxruntime's CPU QMoE rounds an 8-bit expert's input (checked on a one-node graph)."""
    blocks = x.reshape(*x.shape[:-1], -1, block)
    scale = blocks.abs().amax(-1, keepdim=True) / 127
    scale = torch.where(scale == 0, 1.0, scale)
    return (torch.round(blocks / scale) * scale).reshape(x.shape)


def test_int8_experts_become_qmoe_at_accuracy_level_4(tmp_path):
    """8-bit QMoE rounds its activations to int8 per block at every level, so int8 experts become
    QMoE at level 4 only: exact against the dequantized experts run on activations rounded that
    way (the other linears kept float here, to isolate the experts); at level 0 they stay float,
    with the reason."""
    model, config = make_checkpoint("mixtral", tmp_path / "c")
    float_linears = ["*.self_attn.*", "*.mlp.gate", "lm_head", "model.embed_tokens"]
    out = mobius.build(
        tmp_path / "c", precision="int8", accuracy_level=4, quant_exclude=float_linears
    ).save(tmp_path / "q")
    assert ops(out).count("QMoE") == config.num_hidden_layers and "MatMulNBits" not in ops(out)
    ref = copy.deepcopy(model)
    linear = torch.nn.functional.linear

    def rounded_linear(x, weight, bias=None):
        return linear(_int8_blocks(x, 32), weight, bias)

    def experts_forward(forward):
        def call(*args, **kwargs):
            torch.nn.functional.linear = rounded_linear
            try:
                return forward(*args, **kwargs)
            finally:
                torch.nn.functional.linear = linear

        return call

    with torch.no_grad():
        for layer in ref.model.layers:
            experts = layer.mlp.experts
            for stacked in (experts.gate_up_proj, experts.down_proj):
                stacked.copy_(
                    torch.stack([reference_dequantized(w, 8, 32, False) for w in stacked])
                )
            experts.config._experts_implementation = "eager"  # the loop over F.linear
            experts.forward = experts_forward(experts.forward)
    assert max_abs_diff(ref, out, config) <= ATOL
    moe = ir.node("MoE", [], domain="com.microsoft")
    assert "--accuracy-level 4 only" in why_float(moe, Scheme(8, 32, False, 0), excluded=False)
