"""Tiny GGUF files for tests, written with the ``gguf`` package: a two-layer llama whose linear
weights are random blocks of many ggml types, so one build exercises every block decoder, the Q/K
row order transformers restores, and the dequantized fallback."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# ggml type -> (bytes per block, weights per block, {byte offset of a float16 field: magnitude})
BLOCKS: dict[str, tuple[int, int, dict[int, float]]] = {
    "Q4_0": (18, 32, {0: 0.01}),
    "Q4_1": (20, 32, {0: 0.01, 2: -0.08}),
    "Q5_0": (22, 32, {0: 0.005}),
    "Q5_1": (24, 32, {0: 0.005, 2: -0.08}),
    "Q8_0": (34, 32, {0: 0.0006}),
    "Q4_K": (144, 256, {0: 0.0005, 2: 0.002}),
    "Q5_K": (176, 256, {0: 0.0003, 2: 0.002}),
    "Q6_K": (210, 256, {208: 0.00015}),
}

# tensor (in each layer) -> ggml type, layer by layer: every mapped type, permuted Q and K rows of
# exact and float-zero-point types, a dequantized type (Q5_K, Q5_1) and a float one (F16)
TINY_LLAMA_TYPES = [
    {
        "attn_q": "Q4_0",
        "attn_k": "Q4_1",
        "attn_v": "Q5_0",
        "attn_output": "Q4_K",
        "ffn_gate": "Q6_K",
        "ffn_up": "Q5_K",
        "ffn_down": "Q8_0",
    },
    {
        "attn_q": "Q4_K",
        "attn_k": "Q6_K",
        "attn_v": "Q8_0",
        "attn_output": "Q4_0",
        "ffn_gate": "Q4_1",
        "ffn_up": "F16",
        "ffn_down": "Q5_1",
    },
]
HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, VOCAB = 256, 4, 2, 256, 64


def random_blocks(type_name: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random ``rows x cols`` weights of ``type_name`` as raw blocks (uint8 ``[rows, row_bytes]``):
    random codes and sub-block scales, float16 scales of a moderate size."""
    nbytes, per_block, fields = BLOCKS[type_name]
    raw = rng.integers(0, 256, (rows, cols // per_block, nbytes), dtype=np.uint8)
    for offset, size in fields.items():
        values = (size * rng.uniform(0.5, 1.5, raw.shape[:2])).astype(np.float16)
        raw[..., offset : offset + 2] = values[..., None].view(np.uint8)
    return raw.reshape(rows, -1)


def write_tiny_llama(path: Path, *, seed: int = 0, types: list[dict] | None = None) -> Path:
    """A two-layer llama GGUF (no tokenizer; tied embeddings) at ``path``."""
    import gguf

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(len(types or TINY_LLAMA_TYPES))
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(VOCAB)
    head = HIDDEN // HEADS
    shapes = {
        "attn_q": (HIDDEN, HIDDEN),
        "attn_k": (KV_HEADS * head, HIDDEN),
        "attn_v": (KV_HEADS * head, HIDDEN),
        "attn_output": (HIDDEN, HIDDEN),
        "ffn_gate": (INTERMEDIATE, HIDDEN),
        "ffn_up": (INTERMEDIATE, HIDDEN),
        "ffn_down": (HIDDEN, INTERMEDIATE),
    }

    def add(name: str, type_name: str, rows: int, cols: int) -> None:
        if type_name in ("F32", "F16"):
            dtype = np.float32 if type_name == "F32" else np.float16
            writer.add_tensor(name, (rng.standard_normal((rows, cols)) * 0.05).astype(dtype))
            return
        raw = random_blocks(type_name, rows, cols, rng)
        writer.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType[type_name])

    add("token_embd.weight", "Q8_0", VOCAB, HIDDEN)
    for layer, layer_types in enumerate(types or TINY_LLAMA_TYPES):
        for part, type_name in layer_types.items():
            add(f"blk.{layer}.{part}.weight", type_name, *shapes[part])
        for norm in ("attn_norm", "ffn_norm"):
            values = (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
            writer.add_tensor(f"blk.{layer}.{norm}.weight", values)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
