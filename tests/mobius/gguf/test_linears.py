"""GGUF in: block decoders against the ``gguf`` package's dequantizer, and one tiny two-layer llama
GGUF (every mapped ggml type, permuted Q/K rows, dequantized types) converted with
``mobius build-gguf`` and checked against transformers' own GGUF loading, in float32."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from mobius.cli import main
from mobius.quant.nbits_cpu import OFFSET_4BIT, SPLIT_8BIT
from mobius.testing.gguf_files import write_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    """(GGUF file, output directory of `mobius build-gguf`), made once."""
    root = tmp_path_factory.mktemp("gguf")
    path = write_tiny_llama(root / "tiny.gguf")
    out = root / "onnx"
    assert main(["build-gguf", str(path), "--output", str(out), "-q"]) == 0
    return path, out


def test_tiny_gguf_logits_match_transformers(tiny):
    from mobius.runtime.causal_lm import OnnxCausalLM
    from mobius.testing.gguf import hf_from_gguf

    path, out = tiny
    hf = hf_from_gguf(path).eval()
    ids = np.random.default_rng(1).integers(0, 64, (2, 7))
    with torch.no_grad():
        expected = hf(input_ids=torch.from_numpy(ids)).logits.numpy()
    model = OnnxCausalLM(out)
    positions = np.tile(np.arange(7), (2, 1))
    actual, _ = model.run(ids, np.ones_like(ids), positions, model.empty_cache(2))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-4)


def test_tiny_gguf_keeps_blocks_and_reports(tiny):
    path, out = tiny
    report = json.loads((out / "mobius.json").read_text())["gguf"]
    weights = report["weights"]
    layers = "model.layers.{}.{}.weight"
    assert weights[layers.format(0, "self_attn.q_proj")]["exact"] is True  # Q4_0
    assert weights[layers.format(1, "self_attn.q_proj")]["exact"] is False  # Q4_K, float zp
    assert weights[layers.format(0, "mlp.up_proj")]["as"].startswith("dequantized: 8-bit codes")
    assert weights[layers.format(1, "mlp.up_proj")]["as"] == "float, as stored"  # F16
    assert weights["model.embed_tokens.weight"]["gguf_type"] == "Q8_0"
    assert "12 weights kept quantized (8 bit-exact, 4 with float zero points)" in report["summary"]
    # on the CPU EP, 8-bit blocks run as two 4-bit planes and float zero points as an offset
    planes = [k for k, w in weights.items() if w["as"].endswith(SPLIT_8BIT)]
    offsets = [k for k, w in weights.items() if w["as"].endswith(OFFSET_4BIT)]
    assert "model.embed_tokens.weight" in planes and len(offsets) == 4
    graph = onnx.load(out / "model.onnx", load_external_data=False).graph
    ops = [n.op_type for n in graph.node]
    bits = {a.i for n in graph.node for a in n.attribute if a.name == "bits"}
    assert bits == {4}
    # 11 of 14 layer linears, and the tied lm_head
    assert ops.count("MatMulNBits") == 12 + len(planes)
    assert ops.count("GatherBlockQuantized") == 2  # the embedding reads the lm_head's planes
    # the Q5_K, Q5_1 and F16 linears, in float, and two per float-zero-point weight
    assert ops.count("MatMul") >= 3 + 2 * len(offsets)


def test_gguf_q_and_k_rows_are_reordered(tmp_path):
    """llama.cpp stores Q and K rows interleaved for its RoPE; transformers restores HF's order,
    and the blocks are read in that order."""
    from mobius.gguf.source import resolve_gguf
    from mobius.sources.gguf_header import inspect_gguf

    path = write_tiny_llama(tmp_path / "t.gguf", types=[{"attn_q": "Q4_0", "attn_k": "Q8_0"}])
    source = resolve_gguf(path, need_weights=True)
    refs = source.checkpoint.refs
    q, k = (
        refs["model.layers.0.self_attn.q_proj.weight"],
        refs["model.layers.0.self_attn.k_proj.weight"],
    )
    assert q.rows is not None and k.rows is not None and not q.transformed
    assert sorted(q.rows.tolist()) == list(range(256)) and q.rows.tolist() != list(range(256))
    assert inspect_gguf(path).architecture == "llama"


def test_ep_cpu_packs_blocks_that_line_up(tmp_path):
    """``--ep cpu``: linears of one activation whose blocks line up (same bits, block and kind
    of zero point) become one MatMulNBits over their blocks, packed before the CPU forms split
    8-bit codes into planes or float zero points into offsets; logits as transformers'."""
    from mobius.runtime.causal_lm import OnnxCausalLM
    from mobius.testing.gguf import hf_from_gguf

    qkv = {part: "Q4_K" for part in ("attn_q", "attn_k", "attn_v")}  # float zero points
    mlp = {"ffn_gate": "Q8_0", "ffn_up": "Q8_0", "ffn_down": "Q4_0"}  # 8-bit: two planes
    path = write_tiny_llama(tmp_path / "t.gguf", types=[{**qkv, "attn_output": "Q4_0", **mlp}])
    out = tmp_path / "onnx"
    argv = ["build", "--model", str(path), "--output", str(out), "-q", "--ep", "cpu"]
    assert main(argv) == 0
    info = json.loads((out / "mobius.json").read_text())
    layer = "model.layers.0.{}_proj.weight"
    assert info["matmulnbits_packed"] == [
        [layer.format(f"self_attn.{p}") for p in "qkv"],
        [layer.format(f"mlp.{p}") for p in ("gate", "up")],
    ]
    assert len(info["matmulnbits_cpu_forms"]) == 3  # the packed q/k/v and gate/up, the lm_head
    hf = hf_from_gguf(tmp_path / "t.gguf")
    ids = np.random.default_rng(1).integers(0, 64, (2, 7))
    with torch.no_grad():
        expected = hf.eval()(input_ids=torch.from_numpy(ids)).logits.numpy()
    model = OnnxCausalLM(out)
    positions = np.tile(np.arange(7), (2, 1))
    actual, _ = model.run(ids, np.ones_like(ids), positions, model.empty_cache(2))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-4)
