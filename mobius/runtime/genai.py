"""``genai_config.json``: what onnxruntime-genai needs to run a converted causal LM by itself.

onnxruntime-genai's decoder-only loop feeds ``input_ids``, ``attention_mask`` (past + new tokens),
``position_ids`` and one key and one value cache per layer, ``[batch, kv_heads, past, head_dim]``,
and reads back ``logits`` and ``present.{i}.key/value`` grown by the new tokens. That is exactly
mobius's causal-LM contract, so the config only describes the graph. It is written when the graph's
cache is key/value pairs of one shape for layers ``0..n-1``; caches that also hold recurrent states
(mamba, jamba, lfm2, xLSTM, ...) are not described: genai drives such states only for its own
``lfm2`` graphs, with other names and layouts (the build log says so).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import onnx_ir as ir

log = logging.getLogger("mobius")

GENAI_CONFIG_FILE = "genai_config.json"
GENERIC_TYPE = "decoder"  # genai's generic decoder-only model type
# HF model types that onnxruntime-genai (0.18) accepts as decoder-only LLMs under the same name and
# runs through its generic decoder loop. Every other type is written as "decoder", which genai runs
# the same way. Left out on purpose although genai knows the name: gpt2 (genai's own GPT-2 model
# expects one combined past per layer), lfm2 (genai's conv-state layout), chatglm.
NAMED_TYPES = frozenset(
    {
        "ernie4_5",
        "gemma",
        "gemma2",
        "gemma3_text",
        "granite",
        "internlm2",
        "llama",
        "mistral",
        "nemotron",
        "olmo",
        "phi",
        "phi3",
        "phimoe",
        "qwen2",
        "qwen3",
        "smollm3",
    }
)
_CACHE_NAME = re.compile(r"^past_key_values\.(\d+)\.(.+)$")
# search options copied from generation_config.json, with genai's defaults where it has none
SEARCH_DEFAULTS: dict[str, Any] = {
    "do_sample": False,
    "num_beams": 1,
    "num_return_sequences": 1,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "diversity_penalty": 0.0,
}


class NotDrivable(ValueError):
    """The graph's inputs are not what onnxruntime-genai's decoder loop feeds."""


def genai_model_type(model_type: str) -> str:
    """The ``model.type`` genai gets for an HF ``model_type``: the same name, or ``decoder``."""
    return model_type if model_type in NAMED_TYPES else GENERIC_TYPE


def cache_geometry(model: ir.Model) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a graph whose cache genai can drive; else NotDrivable."""
    shapes: dict[tuple[int, str], tuple] = {}
    for value in model.graph.inputs:
        found = _CACHE_NAME.match(value.name or "")
        if found:
            shapes[int(found.group(1)), found.group(2)] = tuple(value.shape or ())
    if not shapes:
        raise NotDrivable("the graph has no key/value cache")
    kinds = sorted({kind for _, kind in shapes} - {"key", "value"})
    if kinds:
        raise NotDrivable(
            f"the cache also holds {', '.join(kinds)} states, which onnxruntime-genai's decoder "
            "loop does not carry"
        )
    layers = 1 + max(layer for layer, _ in shapes)
    if set(shapes) != {(i, kind) for i in range(layers) for kind in ("key", "value")}:
        raise NotDrivable("cache layers are not numbered 0..n-1 with one key and one value each")
    distinct = set(shapes.values())
    if len(distinct) != 1:
        raise NotDrivable("key and value caches differ in shape across layers (or key vs value)")
    shape = distinct.pop()
    if len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int):
        raise NotDrivable(f"cache shape {list(shape)} is not [batch, kv_heads, past, head_dim]")
    return layers, shape[1], shape[3]


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def _token_ids(generation: dict, config: Any, name: str) -> int | list[int] | None:
    value = generation.get(name)
    if value is None:
        value = getattr(config, name, None)
    if isinstance(value, list):
        value = [int(v) for v in value if v is not None]
        return value[0] if len(value) == 1 else value or None
    return int(value) if value is not None else None


def genai_config(
    model: ir.Model, hf_config: Any, checkpoint_dir: Path, *, filename: str = "model.onnx"
) -> dict:
    """The genai_config.json contents for a converted causal LM (NotDrivable where genai cannot run it).

    Sizes come from the graph (cache shape) and the HF config; token ids and search defaults from
    ``generation_config.json`` beside the checkpoint, falling back to ``config.json``.
    """
    from mobius.sources.config import position_limit

    layers, kv_heads, head_dim = cache_geometry(model)
    names = {v.name for v in model.graph.inputs}
    outputs = {v.name for v in model.graph.outputs}
    if not names & {"input_ids", "inputs_embeds"} or "logits" not in outputs:
        raise NotDrivable("the graph does not take input_ids and return logits")
    text = hf_config.get_text_config()
    generation = _read_json(Path(checkpoint_dir) / "generation_config.json")
    eos = _token_ids(generation, text, "eos_token_id")
    if eos is None:  # genai has no "never stop": it then stops at the pad id (0 without one)
        log.warning(
            "no eos_token_id in the generation config: onnxruntime-genai stops at the pad id"
        )
    pad = _token_ids(generation, text, "pad_token_id")
    if pad is None or isinstance(pad, list):
        pad = (eos[0] if isinstance(eos, list) else eos) if pad is None else pad[0]
    context = position_limit(hf_config) or 4096
    logits_shape = next(v.shape for v in model.graph.outputs if v.name == "logits")
    vocab = logits_shape[-1] if logits_shape and isinstance(logits_shape[-1], int) else None
    heads = getattr(text, "num_attention_heads", None) or kv_heads
    contract = ("input_ids", "inputs_embeds", "attention_mask", "position_ids")  # VLM: embeds
    inputs = {n: n for n in contract if n in names}
    decoder = {
        "filename": filename,
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "head_size": head_dim,
        "hidden_size": getattr(text, "hidden_size", None) or heads * head_dim,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "num_hidden_layers": layers,
        "inputs": {
            **inputs,
            "past_key_names": "past_key_values.%d.key",
            "past_value_names": "past_key_values.%d.value",
        },
        "outputs": {
            "logits": "logits",
            "present_key_names": "present.%d.key",
            "present_value_names": "present.%d.value",
        },
    }
    search = {k: generation.get(k, v) for k, v in SEARCH_DEFAULTS.items()}
    search = {k: SEARCH_DEFAULTS[k] if v is None else v for k, v in search.items()}
    search.update(
        max_length=context,
        min_length=0,
        early_stopping=True,
        past_present_share_buffer=False,  # past [.., past, ..] in, present [.., past + new, ..] out
    )
    top = {
        "type": genai_model_type(hf_config.model_type),
        "bos_token_id": _token_ids(generation, text, "bos_token_id"),
        "eos_token_id": eos,
        "pad_token_id": pad,
        "context_length": context,
        "vocab_size": vocab or getattr(text, "vocab_size", None),
        "decoder": decoder,
    }
    return {"model": {k: v for k, v in top.items() if v is not None}, "search": search}


def genai_files(model: ir.Model, hf_config: Any, checkpoint_dir: Path) -> dict[str, str]:
    """``{"genai_config.json": text}`` for the build's output, or nothing (and why, in the log)."""
    try:
        config = genai_config(model, hf_config, checkpoint_dir)
    except NotDrivable as reason:
        log.info("no %s: %s", GENAI_CONFIG_FILE, reason)
        return {}
    return {GENAI_CONFIG_FILE: json.dumps(config, indent=2)}
