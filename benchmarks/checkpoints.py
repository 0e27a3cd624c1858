"""Random-weight checkpoints for the conversion benchmarks, written tensor by tensor.

The state-dict keys and shapes come from the model built on the meta device (no memory); each
tensor is then generated, written into its safetensors shard and freed, so even a 16 GB
checkpoint never holds more than one tensor in memory. The safetensors header is computed from
the shapes up front, which is what lets the data follow one tensor at a time. A byte-level BPE
tokenizer trained locally (``examples/make_tiny_llama.py``) is saved beside it: the
onnxruntime-genai builder reads one.

    python benchmarks/checkpoints.py NAME DIRECTORY   (NAME: a key of MODELS)
"""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARD_BYTES = 4 << 30
DTYPE_NAMES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}

QWEN2_05B = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


LLAMA32_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 8192,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


LLAMA32_3B = {
    **LLAMA32_1B,
    "hidden_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 24,
    "head_dim": 128,
    "intermediate_size": 8192,
}


LLAMA31_8B = {
    **LLAMA32_1B,
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "head_dim": 128,
    "intermediate_size": 14336,
    "tie_word_embeddings": False,
    "rope_parameters": {**LLAMA32_1B["rope_parameters"], "factor": 8.0},
}


# name -> (config, checkpoint dtype); None: the bundled tiny Llama
MODELS = {
    "tiny": None,
    "qwen2-0.5b": (QWEN2_05B, "float32"),
    "llama-3.2-1b": (LLAMA32_1B, "float32"),
    "llama-3.2-3b": (LLAMA32_3B, "bfloat16"),
    "llama-3.1-8b": (LLAMA31_8B, "bfloat16"),
}


def state_shapes(spec: dict, dtype: str) -> tuple[object, dict[str, tuple[int, ...]]]:
    """The transformers config for ``spec`` and its model's saved tensors (tied ones once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(spec)
    config = AutoConfig.for_model(spec.pop("model_type"), **spec, dtype=dtype)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    config.architectures = [type(model).__name__]  # the genai builder dispatches on it
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)
    return config, shapes


def write_checkpoint(spec: dict, directory: Path, dtype: str, seed: int = 0) -> Path:
    """Write the checkpoint for ``spec`` into ``directory`` (atomically: a ``.partial`` sibling
    renamed at the end); matrices ~N(0, 0.02), vectors near 1."""
    import torch

    sys.path.insert(0, str(REPO / "examples"))
    import make_tiny_llama

    torch.manual_seed(seed)
    tmp = directory.with_name(directory.name + ".partial")
    for path in (tmp, directory):
        shutil.rmtree(path, ignore_errors=True)
    tmp.mkdir(parents=True)
    config, shapes = state_shapes(spec, dtype)
    torch_dtype = getattr(torch, dtype)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    shards: list[list[str]] = [[]]
    size = 0
    for key, shape in shapes.items():
        nbytes = itemsize * _numel(shape)
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += nbytes
    weight_map: dict[str, str] = {}
    for n, keys in enumerate(shards, 1):
        name = (
            "model.safetensors"
            if len(shards) == 1
            else f"model-{n:05d}-of-{len(shards):05d}.safetensors"
        )
        _write_shard(tmp / name, keys, shapes, torch_dtype, itemsize)
        weight_map.update(dict.fromkeys(keys, name))
    if len(shards) > 1:
        total = sum(itemsize * _numel(s) for s in shapes.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    tokenizer = make_tiny_llama.train_tokenizer(make_tiny_llama.VOCAB_SIZE)
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(directory)
    return directory


def _write_shard(path: Path, keys: list[str], shapes: dict, dtype, itemsize: int) -> None:
    import torch

    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key in keys:
        nbytes = itemsize * _numel(shapes[key])
        header[key] = {
            "dtype": DTYPE_NAMES[str(dtype).removeprefix("torch.")],
            "shape": list(shapes[key]),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data aligned to 8 bytes, as safetensors writes it
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for key in keys:
            shape = shapes[key]
            t = torch.randn(shape)
            t = (1 + 0.1 * t) if len(shape) == 1 else t * 0.02
            f.write(t.to(dtype).contiguous().view(torch.uint8).numpy().tobytes())
            del t


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


if __name__ == "__main__":
    name, target = sys.argv[1], Path(sys.argv[2])
    spec, dtype = MODELS[name]
    write_checkpoint(spec, target, dtype)
