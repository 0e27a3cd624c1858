"""Fuzz cases for ``mobius.testing.fuzz``: hypothesis strategies for edits of a tiny checkpoint's
``config.json`` and ``model.safetensors``, and the code that applies them to a copy."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

BASES = ("llama", "qwen2", "gemma3_text", "gpt2")  # the CI test's
# benchmarks/fuzz.py's: also an encoder, MoE, MLA, ALiBi, learned positions, partial rotary
MORE_BASES = (*BASES, "bert", "mixtral", "deepseek_v3", "bloom", "opt", "phi3", "gemma2", "falcon")

# --------------------------------------------------------------------------- strategies

HUGE = [2**31, 2**40, 2**63, 10**30]
LIMITS = [
    2**28,
    10**7,
    65_536,
    2**20,
    10_000,
    16_384,
]  # mobius's own upper bounds (sources/config.py)
junk = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([*HUGE, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([0.5, 64.0, -1.0, 1e-30]),
    st.text(max_size=4),
    st.booleans(),
    st.none(),
    st.lists(st.integers(-2, 70), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(-2, 3), max_size=2),
)

SIZE_KEYS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "n_embd",
    "n_layer",
    "n_head",
    "n_positions",
    "n_inner",
    "sliding_window",
    "rms_norm_eps",
    "layer_norm_epsilon",
    "query_pre_attn_scalar",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "tie_word_embeddings",
    "hidden_act",
    "hidden_activation",
    "activation_function",
    "attention_bias",
    "use_cache",
]
EXTRA_KEYS = [
    "auto_map",
    "quantization_config",
    "text_config",
    "per_layer_config",
    "num_experts",
    "num_local_experts",
    "architectures",
    "model_type",
    "is_encoder_decoder",
    "attn_implementation",
    "_attn_implementation",
    "partial_rotary_factor",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "use_sliding_window",
    "max_window_layers",
    "rope_theta",
    "id2label",
    "chunk_size_feed_forward",
]
# fields of the other bases (MoE routing, MLA ranks, ALiBi, softcaps, OPT's projection, ...)
MODEL_KEYS = [
    "num_experts_per_tok",
    "num_local_experts",
    "n_routed_experts",
    "n_shared_experts",
    "n_group",
    "topk_group",
    "first_k_dense_replace",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "moe_intermediate_size",
    "routed_scaling_factor",
    "norm_topk_prob",
    "word_embed_proj_dim",
    "type_vocab_size",
    "num_kv_heads",
    "new_decoder_architecture",
    "multi_query",
    "parallel_attn",
    "alibi",
    "max_window_layers",
    "use_sliding_window",
    "rotary_dim",
    "do_layer_norm_before",
    "apply_residual_connection_post_layernorm",
]
ROPE_TYPES = ["default", "linear", "dynamic", "yarn", "llama3", "longrope", "bogus", 3, None]
ROPE_FIELDS = {
    "factor": [0, -1, 0.5, 2.0, "x", None, float("inf"), float("nan")],
    "rope_theta": [0, -1, 1e4, "x", None, 1e308],
    "original_max_position_embeddings": [0, -5, 1024, "x", 2**40],
    "low_freq_factor": [0, 1, 4.0, -1],
    "high_freq_factor": [0, 1, 4.0],
    "partial_rotary_factor": [0, 0.5, 1.5, -1],
    "short_factor": [[1.0] * 8, [1.0], "x"],
    "long_factor": [[1.0] * 8, [], None],
    "attention_factor": [0, -1, 1.0],
    "beta_fast": [0, 32, -1],
}
LAYER_TYPES = ["full_attention", "sliding_attention", "linear_attention", "bogus", 3, None]
DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "auto", "nonsense", "torch.float16"]


@st.composite
def rope_value(draw) -> Any:
    if draw(st.integers(0, 4)) == 0:
        return draw(junk)
    rope: dict[str, Any] = {"rope_type": draw(st.sampled_from(ROPE_TYPES))}
    for name in draw(st.lists(st.sampled_from(sorted(ROPE_FIELDS)), max_size=3, unique=True)):
        rope[name] = draw(st.sampled_from(ROPE_FIELDS[name]))
    if draw(st.booleans()):
        rope["rope_theta"] = 10000.0
    return rope


@st.composite
def config_edit(draw) -> tuple:
    """One edit of config.json: ("set", key, value) or ("del", key)."""
    kind = draw(
        st.sampled_from(
            ["size", "size", "model", "heads", "ratio", "rope", "layers", "dtype", "del", "extra"]
        )
    )
    if kind == "size":
        key = draw(st.sampled_from(SIZE_KEYS))
        value = draw(st.one_of(junk, st.integers(0, 300), st.sampled_from(LIMITS)))
        return ("set", key, value)
    if kind == "model":
        key = draw(st.sampled_from(MODEL_KEYS))
        return ("set", key, draw(st.one_of(st.integers(0, 10), junk)))
    if kind == "heads":  # same weight shapes, another attention layout: must convert with parity
        head_dim = draw(st.sampled_from([8, 16, 32]))
        return ("heads", head_dim)
    if kind == "ratio":
        key = draw(st.sampled_from(["num_attention_heads", "num_key_value_heads", "head_dim"]))
        return ("set", key, draw(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 64])))
    if kind == "rope":
        key = draw(st.sampled_from(["rope_parameters", "rope_scaling"]))
        return ("set", key, draw(rope_value()))
    if kind == "layers":
        value = draw(
            st.one_of(st.lists(st.sampled_from(LAYER_TYPES), max_size=4), junk, st.just([]))
        )
        return ("set", "layer_types", value)
    if kind == "dtype":
        key = draw(st.sampled_from(["dtype", "torch_dtype"]))
        return ("set", key, draw(st.one_of(st.sampled_from(DTYPES), junk)))
    if kind == "del":
        return ("del", draw(st.sampled_from([*SIZE_KEYS[:14], "model_type", "rope_parameters"])))
    return ("set", draw(st.sampled_from(EXTRA_KEYS)), draw(junk))


WEIGHT_DTYPES = ["F32", "F16", "BF16", "I32", "I64", "U8", "BOOL", "F8_E4M3", "Q4", "", 3, None]


@st.composite
def header_edit(draw) -> tuple:
    """One edit of model.safetensors: its length prefix, header JSON, an entry, or its data."""
    kind = draw(
        st.sampled_from(
            ["prefix", "bytes", "entry", "entry", "rename", "delete", "truncate", "meta", "index"]
        )
    )
    if kind == "prefix":
        return ("prefix", draw(st.sampled_from([0, 1, 2, -1, +1, 2**63, 2**64 - 1, "size"])))
    if kind == "bytes":
        junk_header = [b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"a": 1}', b'{"a": {}}', b"  "]
        return ("bytes", draw(st.sampled_from(junk_header)))
    index = draw(st.integers(0, 30))
    if kind == "entry":
        field = draw(st.sampled_from(["dtype", "shape", "data_offsets", "whole"]))
        if field == "dtype":
            value = draw(st.one_of(st.sampled_from(WEIGHT_DTYPES), junk))
        elif field == "shape":
            value = draw(
                st.one_of(
                    st.sampled_from(
                        ["transpose", "grow", "flat", [], [0], [-1], [2**40], [2**62, 4]]
                    ),
                    junk,
                )
            )
        elif field == "data_offsets":
            value = draw(
                st.one_of(
                    st.sampled_from(["shift", "swap", "overlap", [0, 0], [-4, 0], [0, 2**63]]),
                    junk,
                )
            )
        else:
            value = draw(junk)
        return ("entry", index, field, value)
    if kind == "rename":
        return ("rename", index, draw(st.sampled_from(["", "x", "model.weight", "lm_head.bias"])))
    if kind == "delete":
        return ("delete", index)
    if kind == "index":  # a model.safetensors.index.json beside the file
        return ("index", draw(st.one_of(junk, st.sampled_from(INDEXES))))
    if kind == "truncate":
        return ("truncate", draw(st.sampled_from([1, 4, 100, 10_000])))
    return ("meta", draw(junk))


INDEXES = [
    {"weight_map": {}},
    {"weight_map": "model.safetensors"},
    {"weight_map": {"lm_head.weight": "model.safetensors"}},  # a map that misses most tensors
    {"weight_map": {"lm_head.weight": "other.safetensors"}},
    {"weight_map": {"lm_head.weight": "../model.safetensors"}},
    {"weight_map": {"lm_head.weight": "config.json"}},
    {"metadata": {}, "weight_map": {"x": 3}},
]


@dataclass(frozen=True)
class Case:
    base: str
    config_edits: tuple[tuple, ...] = ()
    header_edits: tuple[tuple, ...] = ()


def make_cases(bases: tuple[str, ...] = BASES) -> st.SearchStrategy[Case]:
    """Cases on ``bases``: up to three config edits and, in half of them, up to two file edits."""
    return st.builds(
        Case,
        base=st.sampled_from(bases),
        config_edits=st.lists(config_edit(), max_size=3).map(tuple),
        header_edits=st.one_of(st.just(()), st.lists(header_edit(), max_size=2).map(tuple)),
    )


cases = make_cases()

# --------------------------------------------------------------------------- applying a case


def make_bases(root: Path, names: tuple[str, ...] = BASES) -> dict[str, Path]:
    """A tiny random checkpoint per base model type, under ``root``."""
    from mobius.testing.tiny import make_checkpoint

    bases = {}
    for name in names:
        directory = root / name
        if not (directory / "config.json").exists():
            make_checkpoint(name, directory)
        bases[name] = directory
    return bases


def apply_config_edits(config: dict, edits: tuple[tuple, ...]) -> dict:
    config = json.loads(json.dumps(config))
    for edit in edits:
        if edit[0] == "set":
            config[edit[1]] = edit[2]
        elif edit[0] == "del":
            config.pop(edit[1], None)
        elif edit[0] == "heads":  # keep heads * head_dim and kv_heads * head_dim
            head_dim = edit[1]
            hidden = config.get("hidden_size", config.get("n_embd", 64))
            heads = config.get("num_attention_heads", config.get("n_head", 4))
            kv = config.get("num_key_value_heads", heads)
            old = config.get("head_dim", hidden // heads if isinstance(heads, int) else 16)
            if not all(isinstance(v, int) and v > 0 for v in (heads, kv, old)):
                continue
            if (heads * old) % head_dim or (kv * old) % head_dim:
                continue
            for key in ("num_attention_heads", "n_head"):
                if key in config:
                    config[key] = heads * old // head_dim
            if "num_key_value_heads" in config:
                config["num_key_value_heads"] = kv * old // head_dim
            if "head_dim" in config:
                config["head_dim"] = head_dim
    return config


def apply_header_edits(path: Path, edits: tuple[tuple, ...]) -> None:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header_bytes, data = raw[8 : 8 + length], raw[8 + length :]
    header = json.loads(header_bytes)
    prefix: int | None = None
    for edit in edits:
        keys = sorted(k for k in header if k != "__metadata__") if isinstance(header, dict) else []
        kind = edit[0]
        if kind == "prefix":
            prefix = edit[1]
        elif kind == "bytes":
            header = edit[1]
        elif kind == "truncate":
            data = data[: max(0, len(data) - edit[1])]
        elif kind == "index":
            index = edit[1]
            text = json.dumps(index) if not isinstance(index, str) else index
            (path.parent / "model.safetensors.index.json").write_text(text)
        elif kind == "meta" and isinstance(header, dict):
            header["__metadata__"] = edit[1]
        elif kind in ("entry", "rename", "delete") and keys:
            key = keys[edit[1] % len(keys)]
            if kind == "delete":
                del header[key]
            elif kind == "rename":
                header[edit[2]] = header.pop(key)
            else:
                with contextlib.suppress(TypeError, KeyError, ValueError, AttributeError):
                    _edit_entry(header, key, edit[2], edit[3])  # an entry an earlier edit broke
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    if prefix is None:
        prefix = len(body)
    elif prefix == "size":
        prefix = len(body) + len(data) + 8
    elif isinstance(prefix, int) and -1 <= prefix <= 1 and prefix != 0:
        prefix = len(body) + prefix
    path.write_bytes(struct.pack("<Q", prefix % 2**64) + body + data)


def _edit_entry(header: dict, key: str, field: str, value: Any) -> None:
    entry = header[key]
    if field == "whole":
        header[key] = value
        return
    shape, (begin, end) = entry["shape"], entry["data_offsets"]
    if field == "shape" and value == "transpose":
        value = shape[::-1]
    elif field == "shape" and value == "grow":
        value = [*shape[:-1], shape[-1] + 1] if shape else [1]
    elif field == "shape" and value == "flat":
        value = [math.prod(shape)]
    elif field == "data_offsets" and value == "shift":
        value = [begin + 4, end + 4]
    elif field == "data_offsets" and value == "swap":
        value = [end, begin]
    elif field == "data_offsets" and value == "overlap":
        value = [0, end - begin]
    entry[field] = value


def write_case(case: Case, bases: dict[str, Path], directory: Path) -> Path:
    """The mutated checkpoint for ``case``, copied from its base into ``directory``."""
    shutil.copytree(bases[case.base], directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(
        json.dumps(apply_config_edits(config, case.config_edits))
    )
    if case.header_edits:
        apply_header_edits(directory / "model.safetensors", case.header_edits)
    return directory
