"""CPU-EP latency of the two attention forms ``--ep`` can emit, one layer's attention alone:

- ``Attention-23``: two ONNX ``RotaryEmbedding`` (tables gathered by ``position_ids``), the causal
  mask from ``attention_mask`` and ONNX ``Attention``-23 over packed q/k/v, as the portable graph;
- ``GroupQueryAttention``: ``com.microsoft`` GQA over packed QKV with rotary inside and the
  lengths from ``attention_mask``, as ``--ep cuda`` emits it.

Qwen2.5-0.5B's head shape (14 heads, 2 key/value heads, head_dim 64), float32. The two forms run
interleaved (A, B, A, B, ...) so machine load hits both alike; the median of ``--runs`` is printed
as a markdown table.

    PYTHONPATH=. python benchmarks/ep_attention.py [--threads 2] [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

HEADS, KV_HEADS, HEAD_DIM, MAX_POS = 14, 2, 64, 4096
CASES = [("prefill", 16, 0), ("prefill", 512, 0), ("decode", 1, 128), ("decode", 1, 1024)]
F = TensorProto.FLOAT


def _inputs(packed: bool) -> list:
    q = HEADS * HEAD_DIM
    kv = KV_HEADS * HEAD_DIM
    common = [
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "t"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["b", "s"]),
        helper.make_tensor_value_info("past_key", F, ["b", KV_HEADS, "p", HEAD_DIM]),
        helper.make_tensor_value_info("past_value", F, ["b", KV_HEADS, "p", HEAD_DIM]),
    ]
    if packed:
        return [helper.make_tensor_value_info("qkv", F, ["b", "s", q + 2 * kv]), *common]
    return [
        helper.make_tensor_value_info("q", F, ["b", "s", q]),
        helper.make_tensor_value_info("k", F, ["b", "s", kv]),
        helper.make_tensor_value_info("v", F, ["b", "s", kv]),
        *common,
    ]


def _tables() -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM))
    angles = np.arange(MAX_POS)[:, None] * inv[None]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _const(name: str, array) -> onnx.TensorProto:
    return helper.make_tensor(
        name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape, array.ravel().tolist()
    )


def attention_23() -> onnx.ModelProto:
    cos, sin = _tables()
    i64 = lambda n, v: _const(n, np.array(v, dtype=np.int64))  # noqa: E731
    nodes = [
        helper.make_node("RotaryEmbedding", ["q", "cos_cache", "sin_cache", "position_ids"], ["qr"], num_heads=HEADS),
        helper.make_node("RotaryEmbedding", ["k", "cos_cache", "sin_cache", "position_ids"], ["kr"], num_heads=KV_HEADS),
        # the causal mask of components/attention.py: (q_pos >= k_pos) & not padding
        helper.make_node("Shape", ["attention_mask"], ["total"], start=1, end=2),
        helper.make_node("Shape", ["q"], ["qlen"], start=1, end=2),
        helper.make_node("Sub", ["total", "qlen"], ["past"]),
        helper.make_node("Squeeze", ["total"], ["total_s"]),
        helper.make_node("Squeeze", ["past"], ["past_s"]),
        helper.make_node("Range", ["zero", "total_s", "one"], ["kpos"]),
        helper.make_node("Range", ["past_s", "total_s", "one"], ["qpos"]),
        helper.make_node("Unsqueeze", ["qpos", "ax1"], ["qcol"]),
        helper.make_node("Unsqueeze", ["kpos", "ax0"], ["krow"]),
        helper.make_node("GreaterOrEqual", ["qcol", "krow"], ["causal"]),
        helper.make_node("Unsqueeze", ["attention_mask", "ax12"], ["m4"]),
        helper.make_node("Cast", ["m4"], ["keep"], to=TensorProto.BOOL),
        helper.make_node("And", ["causal", "keep"], ["allowed"]),
        helper.make_node("Where", ["allowed", "fzero", "flow"], ["mask"]),
        helper.make_node(
            "Attention", ["qr", "kr", "v", "mask", "past_key", "past_value"], ["y", "present_key", "present_value"],
            q_num_heads=HEADS, kv_num_heads=KV_HEADS, scale=HEAD_DIM**-0.5,
        ),
    ]  # fmt: skip
    inits = [
        _const("cos_cache", cos), _const("sin_cache", sin), i64("zero", 0), i64("one", 1),
        i64("ax0", [0]), i64("ax1", [1]), i64("ax12", [1, 2]),
        _const("fzero", np.array(0, np.float32)), _const("flow", np.array(np.finfo(np.float32).min, np.float32)),
    ]  # fmt: skip
    return _model(nodes, _inputs(False), inits, [("", 23)])


def group_query_attention() -> onnx.ModelProto:
    cos, sin = _tables()
    nodes = [
        helper.make_node("ReduceSum", ["attention_mask", "ax1"], ["sum"], keepdims=0),
        helper.make_node("Sub", ["sum", "one"], ["last"]),
        helper.make_node("Cast", ["last"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["total"], start=1, end=2),
        helper.make_node("Squeeze", ["total"], ["total_s"]),
        helper.make_node("Cast", ["total_s"], ["total_sequence_length"], to=TensorProto.INT32),
        helper.make_node(
            "GroupQueryAttention",
            ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total_sequence_length",
             "cos_cache", "sin_cache", "position_ids"],
            ["y", "present_key", "present_value"],
            domain="com.microsoft", num_heads=HEADS, kv_num_heads=KV_HEADS, scale=HEAD_DIM**-0.5,
            do_rotary=1,
        ),
    ]  # fmt: skip
    inits = [
        _const("cos_cache", cos), _const("sin_cache", sin),
        _const("ax1", np.array([1], np.int64)), _const("one", np.array(1, np.int64)),
    ]  # fmt: skip
    return _model(nodes, _inputs(True), inits, [("", 23), ("com.microsoft", 1)])


def _model(nodes, inputs, inits, opsets) -> onnx.ModelProto:
    outputs = [
        helper.make_tensor_value_info("y", F, None),
        helper.make_tensor_value_info("present_key", F, None),
        helper.make_tensor_value_info("present_value", F, None),
    ]
    graph = helper.make_graph(nodes, "attention", inputs, outputs, inits)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], ir_version=10
    )


def feeds(new: int, past: int, packed: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    out = {
        "attention_mask": np.ones((1, past + new), np.int64),
        "position_ids": np.arange(past, past + new)[None].astype(np.int64),
        "past_key": rng.standard_normal((1, KV_HEADS, past, HEAD_DIM)).astype(np.float32),
        "past_value": rng.standard_normal((1, KV_HEADS, past, HEAD_DIM)).astype(np.float32),
    }
    qkv = rng.standard_normal((1, new, q + 2 * kv)).astype(np.float32)
    if packed:
        out["qkv"] = qkv
    else:
        out.update(q=qkv[..., :q], k=qkv[..., q : q + kv], v=qkv[..., q + kv :])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    forms = {
        "Attention-23": (attention_23(), False),
        "GroupQueryAttention": (group_query_attention(), True),
    }
    sessions = {
        name: (ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"]), packed)
        for name, (m, packed) in forms.items()
    }  # fmt: skip
    print(f"| case | {' | '.join(sessions)} (ms, median of {args.runs}) | GQA / Attention-23 |")
    print("|---|---|---|---|")
    for kind, new, past in CASES:
        inputs = {name: feeds(new, past, packed) for name, (_, packed) in sessions.items()}
        # the two forms agree before they are timed
        outs = {name: s.run(None, inputs[name])[0] for name, (s, _) in sessions.items()}
        assert np.abs(outs["Attention-23"] - outs["GroupQueryAttention"]).max() < 1e-4
        times = {name: [] for name in sessions}
        for _ in range(args.runs):
            for name, (s, _) in sessions.items():
                start = time.perf_counter()
                s.run(None, inputs[name])
                times[name].append(time.perf_counter() - start)
        ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        label = f"prefill {new}" if kind == "prefill" else f"decode, past {past}"
        ratio = ms["GroupQueryAttention"] / ms["Attention-23"]
        print(
            f"| {label} | {ms['Attention-23']:.3f} | {ms['GroupQueryAttention']:.3f} | {ratio:.2f} |"
        )


if __name__ == "__main__":
    main()
