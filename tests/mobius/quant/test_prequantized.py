"""GPTQ and AWQ 4-bit checkpoints, written here tensor by tensor per each format's documented
packing, convert with their codes, zero points and scales kept in MatMulNBits; the logits match a
float model whose weights this test dequantizes itself, ``(q - zero) * scale``."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from safetensors.torch import save_file

import mobius
from mobius.cli import main
from mobius.runtime.causal_lm import OnnxCausalLM

GROUP = 32
AWQ_PACK_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # the output column held by each nibble of a word


def pack_words(codes: np.ndarray) -> np.ndarray:
    """[..., 8] 4-bit values -> int32 [...]: value j in bits 4j..4j+3."""
    words = np.zeros(codes.shape[:-1], dtype=np.uint32)
    for j in range(8):
        words |= codes[..., j].astype(np.uint32) << (4 * j)
    return words.view(np.int32)


def gptq_tensors(q, zero, scale, act_order=None) -> dict[str, np.ndarray]:
    """q uint8 [K, N], zero [groups, N] (true zero points), scale [groups, N]: GPTQ v1 tensors."""
    k, n = q.shape
    g_idx = np.arange(k) // GROUP if act_order is None else act_order
    return {
        "qweight": pack_words(q.reshape(k // 8, 8, n).transpose(0, 2, 1)),  # along K
        "qzeros": pack_words(((zero - 1) & 15).reshape(len(zero), n // 8, 8)),  # stored minus 1
        "scales": scale.astype(np.float16),
        "g_idx": g_idx.astype(np.int32),
    }


def awq_tensors(q, zero, scale) -> dict[str, np.ndarray]:
    k, n = q.shape

    def interleave(values):  # [rows, N] -> [rows, N/8, 8] with nibble j = column order[j]
        return values.reshape(len(values), n // 8, 8)[..., AWQ_PACK_ORDER]

    return {
        "qweight": pack_words(interleave(q)),
        "qzeros": pack_words(interleave(zero)),
        "scales": scale.astype(np.float16),
    }


def write_checkpoint(directory, method: str, *, act_order: bool = False, bits: int = 4):
    """A tiny llama in ``method``'s format; returns the float reference model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    rng = np.random.default_rng(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=96,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    reference = LlamaForCausalLM(config).eval()
    tensors = {}
    state = reference.state_dict()
    for name, value in state.items():
        module = name.removesuffix(".weight")
        if ".layers." not in name or "proj" not in name:
            tensors[name] = value.contiguous()
            continue
        n, k = value.shape
        q = rng.integers(0, 16, (k, n)).astype(np.uint8)
        zero = rng.integers(1, 16, (k // GROUP, n)).astype(np.uint8)
        scale = rng.uniform(0.005, 0.02, (k // GROUP, n)).astype(np.float16)
        order = rng.permutation(k) // GROUP if act_order and "down" in name else None
        groups = np.arange(k) // GROUP if order is None else order
        # the reference: this test's own dequantization, (q - zero) * scale, per input's group
        dense = (q.astype(np.float32) - zero[groups]) * scale[groups].astype(np.float32)
        state[name].copy_(torch.from_numpy(dense.T))
        packed = (
            gptq_tensors(q, zero, scale, order) if method == "gptq" else awq_tensors(q, zero, scale)
        )
        tensors.update({f"{module}.{part}": torch.from_numpy(v) for part, v in packed.items()})
    directory.mkdir(parents=True)
    save_file(tensors, str(directory / "model.safetensors"))
    spec = {"quant_method": method, "bits": bits, "group_size": GROUP}
    spec |= {"desc_act": act_order, "sym": False} if method == "gptq" else {"version": "gemm"}
    config_dict = config.to_dict() | {"quantization_config": spec}
    (directory / "config.json").write_text(json.dumps(config_dict))
    return reference


def _logits(directory, reference):
    ids = np.random.default_rng(2).integers(0, 96, (2, 6))
    with torch.no_grad():
        expected = reference(input_ids=torch.from_numpy(ids)).logits.numpy()
    model = OnnxCausalLM(directory)
    positions = np.tile(np.arange(6), (2, 1))
    actual, _ = model.run(ids, np.ones_like(ids), positions, model.empty_cache(2))
    return actual, expected


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_packed_weights_map_to_matmulnbits(tmp_path, method):
    """Every layer linear keeps its codes; GPTQ's down_proj has an act-order ``g_idx``, so its
    inputs are gathered by group first."""
    reference = write_checkpoint(tmp_path / "ckpt", method, act_order=method == "gptq")
    out = mobius.build(tmp_path / "ckpt").save(tmp_path / "onnx")
    actual, expected = _logits(out, reference)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-4)
    graph = onnx.load(out / "model.onnx", load_external_data=False).graph
    assert [n.op_type for n in graph.node].count("MatMulNBits") == 7  # every layer linear
    report = json.loads((out / "mobius.json").read_text())["prequantized"]
    assert len(report["kept_quantized"]) == 7 and not report["dequantized"]
    reordered = ["model.layers.0.mlp.down_proj.weight"] if method == "gptq" else []
    assert report["act_order_inputs_reordered"] == reordered


def test_gptq_with_unsupported_bits_is_refused(tmp_path, capsys):
    write_checkpoint(tmp_path / "ckpt", "gptq", bits=3)
    code = main(["build", "--model", str(tmp_path / "ckpt"), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("mobius: error: ") and "bits=3" in err and "4-bit GPTQ" in err
    assert not (tmp_path / "o").exists()
